// Package template builds and stores the read-only root filesystems sandboxes start from.
//
// The one idea: a template exists under its name only when it is complete. Every build (a
// root: a Debian bootstrapped with debootstrap or an imported image; or layers of steps on
// one, RUN steps executed in a runc container) happens in a hidden directory of the store and is renamed
// into <data>/templates/<name> as its last act; a failed, cancelled or crashed build leaves only
// its log. A ready template is never written again: sandboxes see it through an overlay.
//
// Records (the builds asked for over the API and their log lines) live in the server's store
// through the internal/store interfaces (store.TemplateBuilds); only files (root filesystems,
// layers, uploads) live on disk.
//
// EnsureHostPackages installs the Debian packages the host needs for this (debootstrap, runc).
//
// It must not import the store's engines (it takes their interfaces), the orchestrator or the
// edges; host packages come from hostpkg.
package template
