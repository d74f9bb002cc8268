package compat

import (
	"testing"
	"time"
)

// TestSDKWatchSeesUploadsWrite runs envdwatch.test.mjs: the SDK's watchDir sees WRITE for a
// file that files.write uploads, over an existing file and for a new one, as with E2B's envd.
func TestSDKWatchSeesUploadsWrite(t *testing.T) {
	runScenarios(t, "envdwatch.test.mjs", 3*time.Minute)
}
