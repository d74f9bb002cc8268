package template

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Files is a set of files Builds keeps that grows with use, for retention to bound: the
// build records (Builds.Records) or the uploaded archives (Builds.UploadFiles). Files still
// needed are counted but never pruned: records of builds waiting or building, uploads a
// build of this process is using.
type Files struct {
	list func() ([]keptFile, error)
}

// keptFile is one file of a set: its size, the time its age goes by, and whether it may go.
type keptFile struct {
	path     string
	size     int64
	at       time.Time
	needed   bool
	onRemove func()
}

// Kept is what a set holds now.
type Kept struct {
	Count, Bytes int64
	Oldest       time.Time // zero when empty
}

// Kept counts the set's files.
func (f Files) Kept() (Kept, error) {
	files, err := f.list()
	if err != nil {
		return Kept{}, err
	}
	var k Kept
	for _, kf := range files {
		k.Count++
		k.Bytes += kf.size
		if k.Oldest.IsZero() || kf.at.Before(k.Oldest) {
			k.Oldest = kf.at
		}
	}
	return k, nil
}

// PruneBefore deletes up to batch of the set's files older than before, oldest first.
func (f Files) PruneBefore(before time.Time, batch int) (int64, error) {
	return f.prune(batch, func(kf keptFile, _ int) bool { return kf.at.Before(before) })
}

// PruneOverCap deletes up to batch of the oldest files while the set holds more than max.
func (f Files) PruneOverCap(max int64, batch int) (int64, error) {
	return f.prune(batch, func(_ keptFile, total int) bool { return int64(total) > max })
}

// prune deletes, oldest first, the prunable files for which goes holds (given how many
// files are left), at most batch of them.
func (f Files) prune(batch int, goes func(kf keptFile, total int) bool) (int64, error) {
	files, err := f.list()
	if err != nil {
		return 0, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].at.Before(files[j].at) })
	total := len(files)
	var n int64
	for _, kf := range files {
		if n >= int64(batch) || !goes(kf, total) {
			break
		}
		if kf.needed {
			continue
		}
		if err := os.Remove(kf.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		if kf.onRemove != nil {
			kf.onRemove()
		}
		n++
		total--
	}
	return n, nil
}

// Records are the build records: a finished one ages from when it finished.
func (b *Builds) Records() Files {
	return Files{list: func() ([]keptFile, error) {
		entries, err := os.ReadDir(b.dir())
		if err != nil {
			return nil, err
		}
		var out []keptFile
		for _, e := range entries {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok || strings.HasPrefix(id, ".") {
				continue
			}
			r, err := b.Get(id)
			fi, ierr := e.Info()
			if err != nil || ierr != nil {
				continue // gone meanwhile, or not a record
			}
			at := r.CreatedAt
			if r.FinishedAt != nil {
				at = *r.FinishedAt
			}
			out = append(out, keptFile{path: filepath.Join(b.dir(), e.Name()), size: fi.Size(), at: at,
				needed: r.Status == BuildWaiting || r.Status == BuildBuilding,
				onRemove: func() {
					b.mu.Lock()
					delete(b.logs, id)
					b.mu.Unlock()
				}})
		}
		return out, nil
	}}
}

// UploadFiles are the uploaded archives of every team: each ages from its upload.
func (b *Builds) UploadFiles() Files {
	return Files{list: func() ([]keptFile, error) {
		teams, err := os.ReadDir(b.Uploads())
		if err != nil {
			return nil, err
		}
		var out []keptFile
		for _, team := range teams {
			if !team.IsDir() {
				continue
			}
			dir := filepath.Join(b.Uploads(), team.Name())
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, e := range entries {
				hash, ok := strings.CutSuffix(e.Name(), ".tar")
				fi, err := e.Info()
				if !ok || !validHash(hash) || err != nil {
					continue // an upload in progress (.<hash>-*)
				}
				b.mu.Lock()
				needed := b.using[team.Name()+"/"+hash] > 0
				b.mu.Unlock()
				out = append(out, keptFile{path: filepath.Join(dir, e.Name()), size: fi.Size(), at: fi.ModTime(), needed: needed})
			}
		}
		return out, nil
	}}
}

// use marks the uploads req's COPY steps read as needed by a build of team until release.
func (b *Builds) use(team string, req BuildRequest) (release func()) {
	var keys []string
	if team == "" {
		team = "_"
	}
	for _, st := range req.Steps {
		if st.Kind == StepCopy {
			keys = append(keys, team+"/"+st.FilesHash)
		}
	}
	b.mu.Lock()
	for _, k := range keys {
		b.using[k]++
	}
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		for _, k := range keys {
			if b.using[k]--; b.using[k] <= 0 {
				delete(b.using, k)
			}
		}
		b.mu.Unlock()
	}
}
