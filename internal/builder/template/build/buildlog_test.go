package build

import (
	"strings"
	"testing"
)

func TestTheBuildLogIsCutAtItsCapWhileProgressGetsEverything(t *testing.T) {
	var log, progress strings.Builder
	out := &lineWriter{w: &log, progress: &progress, max: 100}
	for range 50 {
		out.Printf("a line of output") // 17 bytes with its newline
	}
	if log.Len() > 100+80 {
		t.Errorf("the build log holds %d bytes, over its cap of 100 and one note", log.Len())
	}
	if strings.Count(log.String(), "build log cut at 100 bytes") != 1 {
		t.Errorf("the log does not say once where it was cut:\n%s", log.String())
	}
	if n := strings.Count(progress.String(), "a line of output"); n != 50 {
		t.Errorf("progress got %d lines, want all 50", n)
	}
}
