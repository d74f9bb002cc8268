package server

import (
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestOfficialSDKVolumes runs test/compat/volume.test.mjs: the npm SDK's Volume class and
// volumeMounts against a server whose volumes hold 32 MiB by default.
func TestOfficialSDKVolumes(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--volume-size-mb", "32"}})
	covetest.RunSDKScenarios(t, "volume.test.mjs", s.URL, s.Key, "E2B_VOLUME_API_URL="+s.URL)
}
