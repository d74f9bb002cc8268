// Package template builds and stores the read-only root filesystems sandboxes start from.
//
// The one idea: a template exists under its name only when it is complete. Every build (a
// root: a Debian bootstrapped with debootstrap or an imported image; or layers of steps on
// one, RUN steps executed in a runc container) happens in a hidden directory of the store and is renamed
// into <data>/templates/<name>, then its record is written, as its last acts; a failed, cancelled
// or crashed build leaves only its log. A ready template's files are never written again:
// sandboxes see them through an overlay.
//
// Records (templates, their tags and layers: store.Templates; the builds asked for over the API
// and their log lines: store.TemplateBuilds) live in the server's store through the
// internal/store interfaces; only files (root filesystems, layers, uploads, each tree's
// manifest, written once) live on disk (records.go).
//
// EnsureHostPackages installs the Debian packages the host needs for this (debootstrap, runc).
//
// It must not import the store's engines (it takes their interfaces), the orchestrator or the
// edges; host packages come from hostpkg.
package template
