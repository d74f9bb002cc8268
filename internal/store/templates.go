package store

import (
	"context"
	"time"
)

// TemplateRecord is one ready template as the store keeps it: the columns a listing selects
// on, and the whole record as the template package shapes it (Record, JSON), which the store
// keeps without reading. Tag is "" for the name itself (its latest build) and names a tag's
// copy of the build it was set on otherwise.
type TemplateRecord struct {
	Name      string
	Tag       string
	TeamID    string
	BuildID   string
	CreatedAt time.Time
	Record    []byte
}

// TemplateLayer is one layer a template step built: its key (the content address its files
// are kept under, on disk or in the object store) and the layer's record, JSON.
type TemplateLayer struct {
	Key       string
	CreatedAt time.Time
	Record    []byte
}

// Templates keeps the records of templates, their tags and their layers; the files (root
// filesystems, layers' diffs) stay where the template store keeps them.
type Templates interface {
	// PutTemplate stores r under its name and tag, replacing the record there when replace
	// is set; ErrConflict when one is there and replace is not.
	PutTemplate(ctx context.Context, r *TemplateRecord, replace bool) error
	// GetTemplate returns the record of name and tag ("" for the name itself); ErrNotFound
	// when there is none.
	GetTemplate(ctx context.Context, name, tag string) (*TemplateRecord, error)
	// ListTemplates returns every template's own record (no tags), by name.
	ListTemplates(ctx context.Context) ([]*TemplateRecord, error)
	// ListTemplateTags returns the tags of name (not the name's own record), by tag.
	ListTemplateTags(ctx context.Context, name string) ([]*TemplateRecord, error)
	// DeleteTemplate deletes name's record and its tags'; ErrNotFound when it has none.
	DeleteTemplate(ctx context.Context, name string) error
	// DeleteTemplateTag deletes one tag of name; ErrNotFound when there is none.
	DeleteTemplateTag(ctx context.Context, name, tag string) error

	// PutTemplateLayer stores l; ErrConflict when a layer with its key is there (the same
	// step, built by another build first).
	PutTemplateLayer(ctx context.Context, l *TemplateLayer) error
	// GetTemplateLayer returns the layer key; ErrNotFound when there is none.
	GetTemplateLayer(ctx context.Context, key string) (*TemplateLayer, error)
	// ListTemplateLayers returns every layer, by key.
	ListTemplateLayers(ctx context.Context) ([]*TemplateLayer, error)
	// DeleteTemplateLayer deletes the layer key; ErrNotFound when there is none.
	DeleteTemplateLayer(ctx context.Context, key string) error
}
