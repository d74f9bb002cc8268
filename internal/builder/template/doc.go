// Package template is the catalog of the read-only root filesystems sandboxes start from:
// which templates, tags and layers exist, their trees on disk, their records, and their
// copies in the object store a cluster shares them through.
//
// The one idea: a template exists under its name only when it is complete. A template is
// made (by internal/builder/template/build, the builder) in a hidden directory of the store (NewTree)
// and published (Publish): renamed into <data>/templates/<name>, then its record written, as
// its last acts; a failed, cancelled or crashed build leaves nothing here. A ready
// template's files are never written again: sandboxes see them through an overlay. Layers
// are published the same way (PublishLayer).
//
// Records (templates, their tags and layers: store.Templates) live in the server's store
// through the internal/store interfaces; only files (root filesystems, layers, each tree's
// manifest, written once) live on disk (records.go). A tree without a record is adopted from
// its manifest.
//
// It must not import the store's engines (it takes their interfaces), the orchestrator, the
// edges, or the builder (internal/builder/template/build), which imports it.
package template
