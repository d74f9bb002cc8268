package proxy_test

import (
	"net/http"

	"github.com/cove-dev/cove/internal/control/proxy"
)

// One listener serves the REST API by path and every sandbox by header or Host, as the
// SDKs expect when E2B_API_URL and E2B_SANDBOX_URL are the same.
func ExampleProxy_Match() {
	var backend proxy.Backend // the orchestrator
	var restAPI http.Handler  // api.New(...)
	p := proxy.New(proxy.Config{Backend: backend, Domain: "sandbox.example.com"})
	srv := &http.Server{Addr: ":3000", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Match(r) {
			p.ServeHTTP(w, r)
			return
		}
		restAPI.ServeHTTP(w, r)
	})}
	_ = srv // srv.ListenAndServe()
}
