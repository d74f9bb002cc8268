package orchestrator

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/observe/events"
)

// addStartTemplate writes a ready template called name with a start command that marks
// marker when it runs, and a ready check that waits for it; withSnapshot adds a start
// snapshot whose checkpoint names origin ("" leaves it without one, as a broken export).
func (h *harness) addStartTemplate(name, marker string, withSnapshot bool, origin string) {
	h.t.Helper()
	h.addTemplate(name, "root:x:0:0:root:/root:/bin/sh\n")
	dir := filepath.Join(h.templates.Dir(), name)
	t := template.Template{Name: name, CreatedAt: time.Now(), StartCmd: "touch " + marker + " && exec sleep 60", ReadyCmd: "test -f " + marker}
	if withSnapshot {
		t.StartSnapshot = &template.StartSnapshot{BuildID: "build-1", CreatedAt: time.Now()}
		ck := filepath.Join(dir, template.StartSnapshotDir, "checkpoint")
		if err := os.MkdirAll(ck, 0o700); err != nil {
			h.t.Fatal(err)
		}
		if origin != "" {
			if err := os.WriteFile(filepath.Join(ck, "origin"), []byte(origin), 0o600); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	meta, _ := json.Marshal(t)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func TestATemplatesStartCommandRunsOrItsSnapshotIsRestored(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash on the host: envd runs in-process here")
	}
	for _, tt := range []struct {
		name             string
		snapshot         bool
		origin           string
		wantRestore, ran bool
	}{
		{"a template without a start snapshot runs its start command and waits for the ready check", false, "", false, true},
		{"a template with a start snapshot is restored from it and runs nothing", true, "build-sandbox", true, false},
		{"a start snapshot the runtime cannot restore falls back to the start command", true, "", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withCheckpoints)
			marker := filepath.Join(t.TempDir(), "started")
			h.addStartTemplate("svc", marker, tt.snapshot, tt.origin)
			sb := h.create(CreateRequest{TemplateID: "svc"})
			_, err := os.Stat(marker)
			if ran := err == nil; ran != tt.ran {
				t.Errorf("start command ran: %v, want %v", ran, tt.ran)
			}
			h.rt.mu.Lock()
			spec := h.rt.specs[sb.ID]
			h.rt.mu.Unlock()
			if restored := spec.Restore != ""; restored != tt.wantRestore || spec.Start == restored {
				t.Errorf("spec restore %q start %v; want restored %v", spec.Restore, spec.Start, tt.wantRestore)
			}
			if tt.wantRestore {
				if _, data := h.event(sb.ID, events.SandboxCreated); data["start_snapshot_build"] != "build-1" {
					t.Errorf("created event %v", data)
				}
			}
			if tt.snapshot && !tt.wantRestore && len(h.logLines("restore from the template's start snapshot failed: the start command runs at create", sb.ID)) != 1 {
				t.Error("the fallback is not logged")
			}
		})
	}
}

func TestABuildTakesAStartSnapshotOnceTheReadyCheckPasses(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash on the host: envd runs in-process here")
	}
	h := newHarness(t, withCheckpoints)
	marker := filepath.Join(t.TempDir(), "started")
	tmpl, err := h.templates.Get("base")
	if err != nil {
		t.Fatal(err)
	}
	tmpl.StartCmd, tmpl.ReadyCmd = "echo warming up; touch "+marker+"; exec sleep 60", "test -f "+marker
	dir := filepath.Join(t.TempDir(), template.StartSnapshotDir)
	var lines []string
	var mu sync.Mutex
	sn, err := h.o.SnapshotStart(h.ctx("req-build"), tmpl, dir, func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	h.rt.mu.Lock()
	made := slices.Clone(h.rt.made)
	h.rt.mu.Unlock()
	t.Run("the snapshot is the build sandbox's checkpoint, exported to the template's dir", func(t *testing.T) {
		origin, err := os.ReadFile(filepath.Join(dir, "checkpoint", "origin"))
		if err != nil || len(made) != 1 || string(origin) != made[0] || sn.Bytes != ckBytes || sn.Dir != dir {
			t.Errorf("origin %q (%v), made %v, snapshot %+v", origin, err, made, sn)
		}
	})
	t.Run("the build's log shows the start command's output and the ready time", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(lines, "    start: warming up") {
			t.Errorf("log %q", lines)
		}
	})
	t.Run("the build sandbox is gone and counts against no quota", func(t *testing.T) {
		if !h.rt.wasDestroyed(made[0]) {
			t.Error("not destroyed")
		}
		h.o.mu.Lock()
		n := len(h.o.creating)
		h.o.mu.Unlock()
		if n != 0 {
			t.Errorf("%d creating", n)
		}
	})
	t.Run("a runtime that cannot checkpoint here refuses before starting anything", func(t *testing.T) {
		h.ck().setErr(func(c *ckRuntime) { c.canErr = errFake })
		if _, err := h.o.SnapshotStart(h.ctx("req-build"), tmpl, filepath.Join(t.TempDir(), "x"), func(string) {}); !errors.Is(err, template.ErrNoStartSnapshot) {
			t.Errorf("err %v", err)
		}
	})
}
