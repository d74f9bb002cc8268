package template

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// BuildLogs is the templates' build log files as a retention dataset (build_logs), a set like
// Files:
// a row is one template's log, its time the log's last write, its bytes the file's size. A
// pruned log is deleted; its template stays, and its page says the log is gone. Each log is
// also cut at 64 MiB as it is written (maxBuildLog).
type BuildLogs struct{ s *Store }

// BuildLogs returns the store's build logs for retention.
func (s *Store) BuildLogs() BuildLogs { return BuildLogs{s} }

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

// Kept counts the build logs.
func (b BuildLogs) Kept() (Kept, error) {
	logs, err := b.logs()
	if err != nil {
		return Kept{}, err
	}
	var k Kept
	for _, l := range logs {
		k.Count++
		k.Bytes += l.size
	}
	if len(logs) > 0 {
		k.Oldest = logs[0].mod
	}
	return k, nil
}

// PruneBefore deletes up to batch logs last written before before.
func (b BuildLogs) PruneBefore(before time.Time, batch int) (int64, error) {
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

// PruneOverCap deletes the oldest logs, up to batch, while more than maxRows are kept.
func (b BuildLogs) PruneOverCap(maxRows int64, batch int) (int64, error) {
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

// Kept is what a set holds now.
type Kept struct {
	Count, Bytes int64
	Oldest       time.Time // zero when empty
}
