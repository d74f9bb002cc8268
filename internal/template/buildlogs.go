package template

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// BuildLogs is the templates' build log files as a retention dataset (store.DatasetBuildLogs):
// a row is one template's log, its time the log's last write, its bytes the file's size. A
// pruned log is deleted; its template stays, and its page says the log is gone. Each log is
// also cut at 64 MiB as it is written (maxBuildLog).
type BuildLogs struct{ s *Store }

// BuildLogs returns the store's build logs for retention.
func (s *Store) BuildLogs() BuildLogs { return BuildLogs{s} }

var _ store.RetentionStore = BuildLogs{}

// buildLog is one template's log file on disk.
type buildLog struct {
	path string
	mod  time.Time
	size int64
}

// logs lists the logs of every ready template, oldest first.
func (b BuildLogs) logs() ([]buildLog, error) {
	ts, err := b.s.List()
	if err != nil {
		return nil, err
	}
	var out []buildLog
	for _, t := range ts {
		fi, err := os.Stat(t.BuildLog)
		if err != nil {
			continue // none, or pruned already
		}
		out = append(out, buildLog{path: t.BuildLog, mod: fi.ModTime(), size: fi.Size()})
	}
	slices.SortFunc(out, func(x, y buildLog) int { return x.mod.Compare(y.mod) })
	return out, nil
}

func check(d store.Dataset) error {
	if d != store.DatasetBuildLogs {
		return fmt.Errorf("template build logs: not the %s dataset", d)
	}
	return nil
}

// Usage implements store.RetentionStore.
func (b BuildLogs) Usage(_ context.Context, d store.Dataset, _ bool) (store.Usage, error) {
	if err := check(d); err != nil {
		return store.Usage{}, err
	}
	logs, err := b.logs()
	if err != nil {
		return store.Usage{}, err
	}
	var u store.Usage
	for _, l := range logs {
		u.Rows++
		u.Bytes += l.size
	}
	if len(logs) > 0 {
		u.Oldest = logs[0].mod
	}
	return u, nil
}

// PruneBefore implements store.RetentionStore: it deletes up to batch logs last written
// before before.
func (b BuildLogs) PruneBefore(_ context.Context, d store.Dataset, before time.Time, batch int) (int64, error) {
	if err := check(d); err != nil {
		return 0, err
	}
	logs, err := b.logs()
	if err != nil {
		return 0, err
	}
	n := 0
	for n < len(logs) && n < batch && logs[n].mod.Before(before) {
		n++
	}
	return b.remove(logs[:n], before)
}

// PruneOverCap implements store.RetentionStore: it deletes the oldest logs, up to batch,
// while more than maxRows are kept.
func (b BuildLogs) PruneOverCap(_ context.Context, d store.Dataset, maxRows int64, batch int) (int64, error) {
	if err := check(d); err != nil {
		return 0, err
	}
	logs, err := b.logs()
	if err != nil {
		return 0, err
	}
	over := min(max(int64(len(logs))-maxRows, 0), int64(batch))
	return b.remove(logs[:over], time.Time{})
}

// remove deletes logs, under the lock that serialises builds' final renames; a log written
// again since it was listed (a rebuild renamed into place) stays when before is set and the
// new log is not older than it.
func (b BuildLogs) remove(logs []buildLog, before time.Time) (int64, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	var n int64
	var errs []error
	for _, l := range logs {
		fi, err := os.Stat(l.path)
		if err != nil || !fi.ModTime().Equal(l.mod) || (!before.IsZero() && !fi.ModTime().Before(before)) {
			continue // gone, or a new build's
		}
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("prune %s: %w", filepath.Base(filepath.Dir(l.path)), err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
