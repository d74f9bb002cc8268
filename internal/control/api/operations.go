package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/errdefs"
)

// notImplementedError is an E2B operation this server does not serve yet: a 501, never a
// 404 "no such route" (which the SDK would turn into "sandbox not found").
type notImplementedError struct{ operation string }

func (e *notImplementedError) Unwrap() error { return errdefs.ErrNotImplemented }

func (e *notImplementedError) Error() string {
	return e.operation + " is not implemented by this Cove server"
}

// e2bOperations is every method and path of the REST API in the official npm e2b SDK
// 2.51.0's OpenAPI paths (its index.d.ts). A request that no real route claims, but that
// matches one of these, answers 501 naming the operation; so a capability added later only
// registers its route, and nobody edits this table. test/compat walks the installed SDK's
// paths against a real server to keep this table and the SDK in step.
var e2bOperations = []string{
	"GET /sandboxes", "POST /sandboxes",
	"GET /sandboxes/{sandboxID}", "DELETE /sandboxes/{sandboxID}",
	"POST /sandboxes/{sandboxID}/connect", "POST /sandboxes/{sandboxID}/fork",
	"GET /sandboxes/{sandboxID}/logs", "GET /sandboxes/{sandboxID}/metrics",
	"PUT /sandboxes/{sandboxID}/network", "POST /sandboxes/{sandboxID}/pause",
	"POST /sandboxes/{sandboxID}/refreshes", "POST /sandboxes/{sandboxID}/resume",
	"POST /sandboxes/{sandboxID}/snapshots", "POST /sandboxes/{sandboxID}/timeout",
	"GET /sandboxes/metrics",
	"GET /secrets", "POST /secrets",
	"GET /secrets/{secretID}", "POST /secrets/{secretID}", "DELETE /secrets/{secretID}",
	"GET /snapshots",
	"GET /teams", "GET /teams/{teamID}/metrics", "GET /teams/{teamID}/metrics/max",
	"GET /templates", "GET /templates/{templateID}", "DELETE /templates/{templateID}",
	"PATCH /templates/{templateID}",
	"GET /templates/{templateID}/builds/{buildID}/logs",
	"GET /templates/{templateID}/builds/{buildID}/status",
	"GET /templates/{templateID}/files/{hash}", "GET /templates/{templateID}/tags",
	"GET /templates/aliases/{alias}", "POST /templates/tags", "DELETE /templates/tags",
	"GET /v2/sandboxes", "POST /v2/sandboxes",
	"POST /v2/sandboxes/{sandboxID}/connect", "GET /v2/sandboxes/{sandboxID}/logs",
	"GET /v2/templates", "PATCH /v2/templates/{templateID}",
	"POST /v2/templates/{templateID}/builds/{buildID}",
	"POST /v3/templates",
	"GET /volumes", "POST /volumes", "GET /volumes/{volumeID}", "DELETE /volumes/{volumeID}",
}

// Operations returns the E2B operations the API answers (served, or 501 naming them), in
// "METHOD /path" form: test/server checks them against the installed SDK's paths, both ways.
func Operations() []string { return slices.Clone(e2bOperations) }

// e2bOperation returns the E2B operation ("PUT /sandboxes/{sandboxID}/network") that r's
// method and path match, preferring literal segments over wildcards, or "" for none.
func e2bOperation(r *http.Request) string {
	got := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	best, bestLiterals := "", -1
	for _, op := range e2bOperations {
		method, path, _ := strings.Cut(op, " ")
		if method != r.Method {
			continue
		}
		want := strings.Split(strings.Trim(path, "/"), "/")
		if len(want) != len(got) {
			continue
		}
		literals := 0
		for i, seg := range want {
			if strings.HasPrefix(seg, "{") {
				if got[i] == "" {
					literals = -1
					break
				}
				continue
			}
			if seg != got[i] {
				literals = -1
				break
			}
			literals++
		}
		if literals > bestLiterals {
			best, bestLiterals = op, literals
		}
	}
	return best
}

// errUnrouted is the error for a request no route claimed: 501 for an E2B operation this
// server does not serve yet, 404 "no such route" for anything else.
func errUnrouted(r *http.Request) error {
	if op := e2bOperation(r); op != "" {
		return &notImplementedError{operation: op}
	}
	return errNoRoute(r)
}
