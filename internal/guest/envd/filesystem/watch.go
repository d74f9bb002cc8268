package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/fsnotify/fsnotify"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// maxBufferedEvents bounds the events a watcher holds for a slow stream or an unpolled
// CreateWatcher; past it events are counted as dropped, not kept.
const maxBufferedEvents = 10_000

// watcher turns fsnotify events under root into FilesystemEvents and buffers them until a
// WatchDir stream or GetWatcherEvents takes them. It only wakes on inotify events, so an idle
// watcher costs no CPU.
type watcher struct {
	user         *identity.User // whose file system credentials watch and describe
	root         string
	recursive    bool
	includeEntry bool
	log          *slog.Logger
	fsw          *fsnotify.Watcher

	mu      sync.Mutex
	events  []*rpc.FilesystemEvent
	dropped int

	ready     chan struct{} // holds a token when events are waiting
	done      chan struct{} // closed once the watcher is stopped
	closeOnce sync.Once
	addFailed bool // a subdirectory could not be watched; logged once
}

// newWatcher watches root for u: with u's file system credentials, so u must be allowed to
// read the directories watched.
func newWatcher(log *slog.Logger, u *identity.User, root string, recursive, includeEntry, allowNetworkMounts bool) (w *watcher, err error) {
	err = u.Act(func() error {
		w, err = startWatcher(log, u, root, recursive, includeEntry, allowNetworkMounts)
		return err
	})
	if err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

func startWatcher(log *slog.Logger, u *identity.User, root string, recursive, includeEntry, allowNetworkMounts bool) (*watcher, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, OSError("watch", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("watch %s: %w: not a directory", root, fault.ErrInvalid)
	}
	if !allowNetworkMounts {
		if fsType, ok := networkMount(root); ok {
			return nil, fmt.Errorf("watch %s: %w: the directory is on a network mount (%s), where inotify misses remote changes; set allow_network_mounts to watch it anyway",
				root, fault.ErrFailedPrecond, fsType)
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	w := &watcher{
		user:         u,
		root:         root,
		recursive:    recursive,
		includeEntry: includeEntry,
		log:          log.With(telemetry.KeyPath, root),
		fsw:          fsw,
		ready:        make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	if err := fsw.Add(root); err != nil {
		fsw.Close()
		return nil, OSError("watch", root, err)
	}
	if recursive {
		w.addTree(root, false)
	}
	return w, nil
}

func (w *watcher) run() {
	for {
		select {
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if err := w.user.Act(func() error { w.handle(ev); return nil }); err != nil {
				w.log.Warn("watch event dropped", telemetry.KeyError, err.Error())
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.mu.Lock()
				w.dropped++
				w.mu.Unlock()
			}
			w.log.Warn("watch error", telemetry.KeyError, err.Error())
		}
	}
}

var eventTypes = []struct {
	op fsnotify.Op
	t  rpc.EventType
}{
	{fsnotify.Create, rpc.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, rpc.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, rpc.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, rpc.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, rpc.EventType_EVENT_TYPE_CHMOD},
}

func (w *watcher) handle(ev fsnotify.Event) {
	for _, et := range eventTypes {
		if ev.Has(et.op) {
			w.push(ev.Name, et.t)
		}
	}
	if w.recursive && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			w.addTree(ev.Name, true)
		}
	}
}

// addTree watches dir and every directory below it, without following symlinks. With
// announce, what it finds below dir is reported as created: those entries may have been
// made before the watch on their directory existed, and would otherwise go unseen.
func (w *watcher) addTree(dir string, announce bool) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: nothing to watch there
		}
		if announce && p != dir {
			w.push(p, rpc.EventType_EVENT_TYPE_CREATE)
		}
		if d.IsDir() && p != w.root {
			if err := w.fsw.Add(p); err != nil && !w.addFailed {
				w.addFailed = true // only touched from run() and newWatcher, never concurrently
				w.log.Warn("watch subdirectory failed", telemetry.KeyDir, p, telemetry.KeyError, err.Error())
			}
		}
		return nil
	})
}

func (w *watcher) push(path string, t rpc.EventType) {
	name, err := filepath.Rel(w.root, path)
	if err != nil {
		name = path
	}
	ev := &rpc.FilesystemEvent{Name: name, Type: t}
	if w.includeEntry {
		if e, err := Entry(path); err == nil {
			ev.Entry = e
		}
	}
	w.mu.Lock()
	if len(w.events) >= maxBufferedEvents {
		w.dropped++
	} else {
		w.events = append(w.events, ev)
	}
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// drain returns the buffered events and how many were dropped since the last drain.
func (w *watcher) drain() ([]*rpc.FilesystemEvent, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs, dropped := w.events, w.dropped
	w.events, w.dropped = nil, 0
	return evs, dropped
}

func (w *watcher) close() {
	w.closeOnce.Do(func() {
		_ = w.fsw.Close()
		close(w.done)
	})
}

// networkMount reports whether dir is on a network file system, where inotify sees only
// local changes.
func networkMount(dir string) (string, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", false
	}
	switch uint32(st.Type) {
	case 0x6969:
		return "nfs", true
	case 0x517b, 0xff534d42, 0xfe534d42:
		return "smb", true
	case 0x00c36400:
		return "ceph", true
	case 0x5346414f:
		return "afs", true
	}
	return "", false
}
