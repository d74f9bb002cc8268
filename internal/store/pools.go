package store

import "context"

// PoolSizes keeps the warm pools' sizes, by template name.
type PoolSizes interface {
	// SetPoolSize records template's pool size (0 keeps none).
	SetPoolSize(ctx context.Context, template string, size int) error
	// PoolSizes returns every recorded size, by template name.
	PoolSizes(ctx context.Context) (map[string]int, error)
}
