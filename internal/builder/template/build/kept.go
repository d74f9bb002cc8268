package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/store"
)

// Files is a set of files Builds keeps that grows with use, for retention to bound: the
// build records (Builds.Records) or the uploaded archives (Builds.UploadFiles, which
// include the archives the CLI packs for host builds). Files still needed are counted but
// never pruned: records of builds waiting or building, uploads a build is using.
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
	// remove deletes it when it is no file (a record in the store); nil: os.Remove(path).
	remove func() error
	// shared: other processes' builds may read it; it goes only while none holds its lock.
	shared bool
}

// Kept counts the set's files.
func (f Files) Kept() (template.Kept, error) {
	files, err := f.list()
	if err != nil {
		return template.Kept{}, err
	}
	var k template.Kept
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
		if kf.shared {
			gone, err := removeUnheld(kf.path)
			if err != nil {
				return n, err
			}
			if !gone {
				continue
			}
		} else if kf.remove != nil {
			if err := kf.remove(); err != nil {
				return n, err
			}
		} else if err := os.Remove(kf.path); err != nil && !errors.Is(err, os.ErrNotExist) {
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

// Records are the build records: a finished one ages from when it finished. A record goes
// with its log lines; its size is its record's.
func (b *Builds) Records() Files {
	return Files{list: func() ([]keptFile, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rows, err := b.db.ListTemplateBuilds(ctx, "")
		if err != nil {
			return nil, err
		}
		out := make([]keptFile, 0, len(rows))
		for _, r := range rows {
			at := r.CreatedAt
			if r.FinishedAt != nil {
				at = *r.FinishedAt
			}
			id := r.ID
			out = append(out, keptFile{path: id, size: int64(len(r.Record)), at: at, needed: r.Unfinished(),
				remove: func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					err := b.db.DeleteTemplateBuild(ctx, id)
					if errors.Is(err, store.ErrNotFound) {
						return nil // gone meanwhile
					}
					return err
				}})
		}
		return out, nil
	}}
}

// UploadFiles are the uploaded archives of every team, each aging from its upload, and the
// archives the cove CLI packed for host builds (<templates>/.uploads).
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
				if !ok || !template.ValidHash(hash) || err != nil {
					continue // an upload in progress (.<hash>-*)
				}
				b.mu.Lock()
				needed := b.using[team.Name()+"/"+hash] > 0
				b.mu.Unlock()
				out = append(out, keptFile{path: filepath.Join(dir, e.Name()), size: fi.Size(), at: fi.ModTime(), needed: needed})
			}
		}
		host, err := b.store.hostArchives()
		return append(out, host...), err
	}}
}

// hostArchives are the archives the cove CLI packed into the store for host builds
// (HostUploads), each aging from when it was packed. One a build of any process reads (it
// holds the archive's shared lock, see holdArchives) is kept.
func (s *Builder) hostArchives() ([]keptFile, error) {
	dir := filepath.Join(s.Dir(), ".uploads")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []keptFile
	for _, e := range entries {
		hash, ok := strings.CutSuffix(e.Name(), ".tar")
		fi, err := e.Info()
		if !ok || !template.ValidHash(hash) || err != nil || !fi.Mode().IsRegular() {
			continue // being packed (.pack-*)
		}
		p := filepath.Join(dir, e.Name())
		out = append(out, keptFile{path: p, size: fi.Size(), at: fi.ModTime(), shared: true})
	}
	return out, nil
}

// holdArchives takes a shared lock on each archive of dir that steps' COPYs read, until
// release: retention, in whichever process, leaves them alone meanwhile.
func holdArchives(dir string, steps []template.Step) (release func()) {
	var held []*os.File
	for _, st := range steps {
		if st.Kind != template.StepCopy || !template.ValidHash(st.FilesHash) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, st.FilesHash+".tar"))
		if err != nil {
			continue // the step's own open says what is missing
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			f.Close()
			continue
		}
		held = append(held, f)
	}
	return func() {
		for _, f := range held {
			f.Close()
		}
	}
}

// removeUnheld removes the archive at p unless a build holds it (holdArchives), keeping
// its lock while it does so; it reports whether p is gone.
func removeUnheld(p string) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// use marks the uploads req's COPY steps read as needed by a build of team until release.
func (b *Builds) use(team string, req BuildRequest) (release func()) {
	var keys []string
	if team == "" {
		team = "_"
	}
	for _, st := range req.Steps {
		if st.Kind == template.StepCopy {
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
