package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
)

func TestStartSnapshotsNeedARuntimeThatCheckpoints(t *testing.T) {
	h := newHarness(t) // the fake runtime has no Checkpointer
	tmpl, err := h.templates.Get("base")
	if err != nil {
		t.Fatal(err)
	}
	tmpl.StartCmd = "sleep infinity"

	t.Run("a build's start snapshot is refused as unavailable before any sandbox starts", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "snap")
		_, err := h.o.SnapshotStart(h.ctx("req-build"), tmpl, dir, func(string) {})
		if !errors.Is(err, template.ErrNoStartSnapshot) || !strings.Contains(err.Error(), "cannot checkpoint") {
			t.Fatalf("err = %v, want ErrNoStartSnapshot saying why", err)
		}
		if ids, _ := h.rt.List(context.Background()); len(ids) != 0 {
			t.Fatalf("sandboxes started: %v", ids)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s was made: %v", dir, err)
		}
	})

	snapDir := filepath.Join(t.TempDir(), template.StartSnapshotDir)
	if err := os.MkdirAll(filepath.Join(snapDir, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		snap *template.StartSnapshot
		req  CreateRequest
		why  string // "" when none is used for no reason to tell
	}{
		{"a template without a snapshot starts its command, saying nothing", nil, CreateRequest{}, ""},
		{"a create that mounts volumes starts the command", &template.StartSnapshot{Dir: snapDir}, CreateRequest{VolumeMounts: []VolumeMount{{Name: "v", Path: "/data"}}}, "mounts volumes"},
		{"a snapshot taken with a network is not restored on a server without", &template.StartSnapshot{Dir: snapDir, Network: true}, CreateRequest{}, "another network setup"},
		{"a runtime without checkpoints starts the command", &template.StartSnapshot{Dir: snapDir}, CreateRequest{}, "cannot snapshot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tt := *tmpl
			tt.StartSnapshot = c.snap
			sn, why := h.o.startSnapshot(&tt, c.req)
			if sn != nil || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
				t.Fatalf("startSnapshot = %v, %q; want none, %q", sn, why, c.why)
			}
		})
	}
}
