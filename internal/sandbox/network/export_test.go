package network

// ConsistentDump lets the external tests read netlink dumps as the manager does.
func ConsistentDump[T any](dump func() ([]T, error)) ([]T, error) { return consistentDump(dump) }
