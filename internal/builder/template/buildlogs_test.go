package template

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestBuildLogsHaveAnEndOfTheirOwn: the retention pass deletes build logs past their TTL and
// the oldest past the cap, keeps their templates, and reports what is kept.
func TestBuildLogsHaveAnEndOfTheirOwn(t *testing.T) {
	s, err := openDir(t, t.TempDir())
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
	if s, err = openDir(t, s.Dir()); err != nil { // its open adopts the trees
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ttl     time.Duration
		maxRows int64
		kept    []string
	}{
		{"logs past the 30-day TTL go", 30 * 24 * time.Hour, 0, []string{"week", "day", "fresh"}},
		{"past a cap of 2 the oldest go", 0, 2, []string{"day", "fresh"}},
		{"a TTL of an hour leaves the fresh one", time.Hour, 2, []string{"fresh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := s.BuildLogs()
			// In batches of one, as a retention pass would go on until nothing is left to prune.
			for {
				var n, m int64
				var err error
				if tt.ttl > 0 {
					if n, err = b.PruneBefore(now.Add(-tt.ttl), 1); err != nil {
						t.Fatal(err)
					}
				}
				if tt.maxRows > 0 {
					if m, err = b.PruneOverCap(tt.maxRows, 1); err != nil {
						t.Fatal(err)
					}
				}
				if n+m == 0 {
					break
				}
			}
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
			k, err := b.Kept()
			if err != nil {
				t.Fatal(err)
			}
			if k.Count != int64(len(tt.kept)) || k.Bytes != int64(len(tt.kept)*len("==> step 1\n")) {
				t.Errorf("kept: %+v, want %d logs of %d bytes", k, len(tt.kept), len("==> step 1\n"))
			}
		})
	}
}
