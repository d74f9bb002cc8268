package template

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/retention"
	"github.com/cove-dev/cove/internal/store"
)

// TestBuildLogsHaveAnEndOfTheirOwn: the retention pass deletes build logs past their TTL and
// the oldest past the cap, keeps their templates, and reports what is kept.
func TestBuildLogsHaveAnEndOfTheirOwn(t *testing.T) {
	s, err := OpenAt(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ages := map[string]time.Duration{"old": 40 * 24 * time.Hour, "older": 50 * 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "day": 24 * time.Hour, "fresh": time.Minute, "nolog": 0}
	for name, age := range ages {
		dir := filepath.Join(s.Dir(), name)
		if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeMeta(dir, &Template{Name: name}); err != nil {
			t.Fatal(err)
		}
		if age == 0 {
			continue
		}
		log := filepath.Join(dir, "build.log")
		if err := os.WriteFile(log, []byte("==> step 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(log, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	tests := []struct {
		name   string
		policy retention.Policy
		kept   []string
	}{
		{"logs past the 30-day TTL go", retention.Policy{TTL: 30 * 24 * time.Hour}, []string{"week", "day", "fresh"}},
		{"past a cap of 2 the oldest go", retention.Policy{MaxRows: 2}, []string{"day", "fresh"}},
		{"a TTL of an hour leaves the fresh one", retention.Policy{TTL: time.Hour, MaxRows: 2}, []string{"fresh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := retention.New(retention.Config{Store: emptyStore{}, BuildLogs: s.BuildLogs(), Batch: 1, Pause: time.Millisecond,
				Policies: map[store.Dataset]retention.Policy{store.DatasetBuildLogs: tt.policy}})
			r.Pass(ctx)
			for name := range ages {
				if _, err := s.Get(name); err != nil {
					t.Errorf("template %s: %v (pruning its log must keep it)", name, err)
				}
			}
			var kept []string
			for _, name := range []string{"older", "old", "week", "day", "fresh", "nolog"} {
				if _, err := os.Stat(filepath.Join(s.Dir(), name, "build.log")); err == nil {
					kept = append(kept, name)
				}
			}
			if !slices.Equal(kept, tt.kept) {
				t.Fatalf("logs kept: %v, want %v", kept, tt.kept)
			}
			st, err := r.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got *retention.Status
			for i := range st {
				if st[i].Dataset == "build_logs" {
					got = &st[i]
				}
			}
			if got == nil {
				t.Fatalf("status has no build_logs line: %+v", st)
			}
			if got.Rows != int64(len(tt.kept)) || got.Bytes != int64(len(tt.kept)*len("==> step 1\n")) ||
				got.TTLSeconds != int64(tt.policy.TTL/time.Second) || got.MaxRows != tt.policy.MaxRows {
				t.Errorf("status: %+v, want %d logs of %d bytes under %+v", *got, len(tt.kept), len("==> step 1\n"), tt.policy)
			}
		})
	}
}

// emptyStore is a database store holding nothing: this test is about the files.
type emptyStore struct{}

func (emptyStore) Usage(context.Context, store.Dataset, bool) (store.Usage, error) {
	return store.Usage{}, nil
}
func (emptyStore) PruneBefore(context.Context, store.Dataset, time.Time, int) (int64, error) {
	return 0, nil
}
func (emptyStore) PruneOverCap(context.Context, store.Dataset, int64, int) (int64, error) {
	return 0, nil
}
