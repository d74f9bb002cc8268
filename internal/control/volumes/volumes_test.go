package volumes_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/volumes"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// live is a set of sandboxes that hold their mounts: what the orchestrator answers.
type live struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (l *live) HoldsVolumes(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids[id]
}

func (l *live) set(id string, holds bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids[id] = holds
}

// newService is the service over a real volume store of plain directories (sized volumes
// are loop-mounted images: root and mkfs, tested in internal/control/snapshot), its records
// in a real SQLite file.
func newService(t *testing.T, quota volumes.Quota) (*volumes.Service, *snapshot.Volumes, *live) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	st, err := snapshot.OpenVolumes(ctx, filepath.Join(dir, "volumes"), db, "")
	if err != nil {
		t.Fatal(err)
	}
	sbs := &live{ids: map[string]bool{}}
	return volumes.New(volumes.Config{Store: st, Sandboxes: sbs, Quota: func(string) volumes.Quota { return quota }}), st, sbs
}

func TestAVolumeIsDeletedOnlyWhenNoLiveSandboxMountsIt(t *testing.T) {
	svc, st, sbs := newService(t, volumes.Quota{})
	ctx := context.Background()
	vol, err := svc.CreateVolume(ctx, "team", "data", 0)
	if err != nil {
		t.Fatal(err)
	}
	sbs.set("sbx-writer", true)
	if err := st.Attach(ctx, vol, "sbx-writer", "/data", false, sbs.HoldsVolumes); err != nil {
		t.Fatal(err)
	}
	t.Run("its sandbox's mounts name the volume by its name", func(t *testing.T) {
		m, err := svc.VolumeMountsOf(ctx, "team", "sbx-writer")
		if err != nil || len(m) != 1 || m[0] != (volumes.Mount{Name: "data", Path: "/data"}) {
			t.Errorf("mounts %+v, %v", m, err)
		}
	})
	t.Run("while the sandbox holds it, a delete is a 409 naming the sandbox and the volume", func(t *testing.T) {
		err := svc.DeleteVolume(ctx, "team", "data")
		if !errors.Is(err, volumes.ErrConflict) || errdefs.Status(err) != http.StatusConflict ||
			!strings.Contains(err.Error(), "sbx-writer") || !strings.Contains(err.Error(), "data") {
			t.Errorf("delete: %v (status %d); want a 409 naming sbx-writer and data", err, errdefs.Status(err))
		}
	})
	t.Run("once the sandbox no longer holds it, its stale lease does not keep the volume", func(t *testing.T) {
		sbs.set("sbx-writer", false)
		if err := svc.DeleteVolume(ctx, "team", vol.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Volume(ctx, "team", "data"); !errors.Is(err, volumes.ErrNotFound) || errdefs.Status(err) != http.StatusNotFound {
			t.Errorf("volume after its delete: %v", err)
		}
	})
}

func TestATeamsVolumeCountIsItsQuota(t *testing.T) {
	svc, _, _ := newService(t, volumes.Quota{Volumes: 1})
	ctx := context.Background()
	if _, err := svc.CreateVolume(ctx, "team", "a", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateVolume(ctx, "team", "b", 0); errdefs.Status(err) != http.StatusTooManyRequests {
		t.Errorf("second volume: %v; want 429", err)
	}
	if _, err := svc.CreateVolume(ctx, "other-team", "b", 0); err != nil {
		t.Errorf("another team's volume: %v", err)
	}
}
