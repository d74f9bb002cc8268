// Package build makes templates into the catalog (internal/builder/template): a Debian root
// bootstrapped with debootstrap, an OCI image imported (oci), a host directory copied, and
// templates built in steps on one (RUN in runc containers, COPY, ENV, USER, WORKDIR, each
// step a cached layer; dockerfile translates a Dockerfile into them), with a start
// snapshot taken once the start command is ready. Builds asked for over the API are
// records of their own, with their log lines and uploads (Builds).
//
// The one idea: the builder works only in directories the catalog hands it (NewTree, a
// hidden directory below LayersDir) and gives the catalog what it made complete (Publish,
// PublishLayer), or not at all: a build never writes a ready template.
//
// EnsureHostPackages installs the Debian packages the host needs for this (debootstrap, runc).
//
// It must not import the store's engines (it takes their interfaces), the orchestrator or the
// edges; the catalog never imports it.
package build
