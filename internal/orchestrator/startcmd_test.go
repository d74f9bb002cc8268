package orchestrator

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/events"
	"github.com/cove-dev/cove/internal/template"
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
