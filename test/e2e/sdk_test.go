package e2e

import (
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestOfficialSDK runs test/compat/server.test.mjs, the official npm e2b SDK's scenarios,
// against the package's server. The scenarios themselves live in that file.
func TestOfficialSDK(t *testing.T) {
	need(t)
	covetest.RunNode(t, "../compat", "server.test.mjs",
		"E2B_API_URL="+server.URL, "E2B_SANDBOX_URL="+server.URL, "E2B_API_KEY="+server.APIKey)
}
