// Package layering holds no code: its test checks the arrows between Cove's packages. Each
// package's doc comment says what it must not import; the test's table is that rule, enforced
// over every package's transitive imports, so an arrow running back up fails CI instead of
// waiting to become an import cycle. Beside it, duplicates_test.go fails when a wire shape (a
// REST body, an event payload, the error body) is defined twice rather than taken from the
// contract (sdk/), and edge_test.go fails when a package outside the edges (internal/control/api and
// the few listed there) declares an HTTP handler or a mux: every REST route lives under
// internal/control/api.
package layering
