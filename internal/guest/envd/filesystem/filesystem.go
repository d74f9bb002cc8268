// Package filesystem is envd's filesystem.Filesystem Connect service: stat, list, make,
// move and remove paths, and watch directories, on behalf of the sandbox user a call names.
//
// The one idea: every call acts with the file system credentials of the user it names
// (identity.User.Act), so the kernel checks its permissions and what it creates is that
// user's, and every OS error is wrapped once, by OSError,
// with the fault sentinel that becomes its Connect code. Watchers are fsnotify (inotify) only:
// no polling, so an idle sandbox costs nothing.
package filesystem

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
	"github.com/cove-dev/cove/sdk/gen/filesystem/filesystemconnect"
)

// KeepaliveHeader names the request header that sets, in seconds, how often a WatchDir
// stream sends a keepalive event. The E2B SDKs send 50.
const KeepaliveHeader = "Keepalive-Ping-Interval"

// DefaultKeepalive is the keepalive interval when the request does not set one.
const DefaultKeepalive = 90 * time.Second

// Service implements filesystemconnect.FilesystemHandler.
type Service struct {
	defaults *identity.Defaults

	mu       sync.Mutex
	closed   bool
	watchers map[string]*watcher   // CreateWatcher's, by id
	streams  map[*watcher]struct{} // open WatchDir streams
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// New returns the filesystem service acting with the sandbox defaults d.
func New(d *identity.Defaults) *Service {
	return &Service{
		defaults: d,
		watchers: map[string]*watcher{},
		streams:  map[*watcher]struct{}{},
	}
}

// Close stops every watcher: polled watchers are removed and open WatchDir streams end
// with unavailable. The service refuses new watchers afterwards.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	ws := make([]*watcher, 0, len(s.watchers)+len(s.streams))
	for _, w := range s.watchers {
		ws = append(ws, w)
	}
	for w := range s.streams {
		ws = append(ws, w)
	}
	s.watchers = map[string]*watcher{}
	s.streams = map[*watcher]struct{}{}
	s.mu.Unlock()
	for _, w := range ws {
		w.close()
	}
}

// resolve returns the user a call acts as and the absolute path it names.
func (s *Service) resolveReq(h http.Header, p string) (*identity.User, string, error) {
	u, err := s.defaults.FromBasicAuth(h)
	if err != nil {
		return nil, "", err
	}
	abs, err := u.ResolvePath(p)
	if err != nil {
		return nil, "", fmt.Errorf("path %q: %w: %v", p, fault.ErrInvalid, err)
	}
	return u, abs, nil
}

// Stat describes a path. A symlink is followed for its type and mode, as E2B's envd does (the
// SDK's getInfo of a link to a file says "file"): the rest of the entry is the link's own, and
// SymlinkTarget names where it leads. A link that leads nowhere stays a SYMLINK.
func (s *Service) Stat(ctx context.Context, req *connect.Request[rpc.StatRequest]) (*connect.Response[rpc.StatResponse], error) {
	u, p, err := s.resolveReq(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	var e *rpc.EntryInfo
	err = u.Act(func() (err error) {
		if e, err = Entry(p); err != nil {
			return err
		}
		if e.GetType() == rpc.FileType_FILE_TYPE_SYMLINK {
			if fi, err := os.Stat(p); err == nil {
				e.Type = fileType(fi.Mode())
				e.Mode = uint32(fi.Mode().Perm())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&rpc.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its parents, owned by the calling user. An existing
// directory is already_exists (the SDK's makeDir then returns false); an existing
// non-directory is invalid_argument.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[rpc.MakeDirRequest]) (*connect.Response[rpc.MakeDirResponse], error) {
	u, p, err := s.resolveReq(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	var e *rpc.EntryInfo
	err = u.Act(func() error {
		if fi, err := os.Stat(p); err == nil {
			if fi.IsDir() {
				return fmt.Errorf("make dir %s: %w", p, fault.ErrExists)
			}
			return fmt.Errorf("make dir %s: %w: a %s is in the way", p, fault.ErrInvalid, kind(fi.Mode()))
		}
		created, err := MkdirAll(p, u)
		if err != nil {
			return err
		}
		if !created {
			return fmt.Errorf("make dir %s: %w", p, fault.ErrExists)
		}
		e, err = Entry(p)
		return err
	})
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&rpc.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination, creating the destination's parents, and describes
// the moved entry. Moving across file systems is failed_precondition.
func (s *Service) Move(ctx context.Context, req *connect.Request[rpc.MoveRequest]) (*connect.Response[rpc.MoveResponse], error) {
	u, src, err := s.resolveReq(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	dst, err := u.ResolvePath(req.Msg.GetDestination())
	if err != nil {
		return nil, fault.Connect(ctx, fmt.Errorf("destination %q: %w: %v", req.Msg.GetDestination(), fault.ErrInvalid, err))
	}
	var e *rpc.EntryInfo
	err = u.Act(func() error {
		if _, err := os.Lstat(src); err != nil {
			return OSError("move", src, err)
		}
		if _, err := MkdirAll(filepath.Dir(dst), u); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return OSError("move", src+" to "+dst, err)
		}
		e, err = Entry(dst)
		return err
	})
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&rpc.MoveResponse{Entry: e}), nil
}

// ListDir lists a directory (a symlink to one is followed) in lexical order, each directory
// before its contents. Depth 0 and 1 list the direct children; depth N also lists what is
// below them down to N levels. Symlinked subdirectories are listed, not entered.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[rpc.ListDirRequest]) (*connect.Response[rpc.ListDirResponse], error) {
	u, p, err := s.resolveReq(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	var entries []*rpc.EntryInfo
	err = u.Act(func() error {
		fi, err := os.Stat(p)
		if err != nil {
			return OSError("list", p, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("list %s: %w: not a directory", p, fault.ErrInvalid)
		}
		return list(ctx, p, depth, &entries)
	})
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&rpc.ListDirResponse{Entries: entries}), nil
}

func list(ctx context.Context, dir string, depth int, out *[]*rpc.EntryInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return OSError("list", dir, err)
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		fi, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		*out = append(*out, entryFromInfo(p, fi))
		if depth > 1 && de.IsDir() {
			if err := list(ctx, p, depth-1, out); err != nil && !errors.Is(err, fs.ErrNotExist) {
				if errors.Is(err, fault.ErrPermission) {
					continue // listed, but its contents are not readable: keep going
				}
				return err
			}
		}
	}
	return nil
}

// Remove deletes a file, a symlink (not its target) or a directory with its contents; a
// path that does not exist is already removed, and succeeds.
func (s *Service) Remove(ctx context.Context, req *connect.Request[rpc.RemoveRequest]) (*connect.Response[rpc.RemoveResponse], error) {
	u, p, err := s.resolveReq(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	// A missing path is not an error, as in E2B's envd (os.RemoveAll): the path is gone either way.
	err = u.Act(func() error { return OSError("remove", p, os.RemoveAll(p)) })
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&rpc.RemoveResponse{}), nil
}

// WatchDir streams the changes under a directory: the start event at once, then one event
// per change with its name relative to the directory, and a keepalive every
// Keepalive-Ping-Interval seconds, until the client goes away.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[rpc.WatchDirRequest], stream *connect.ServerStream[rpc.WatchDirResponse]) error {
	u, p, err := s.resolveReq(req.Header(), req.Msg.GetPath())
	if err != nil {
		return fault.Connect(ctx, err)
	}
	log := telemetry.Logger(ctx).With(telemetry.KeyRPCMethod, "filesystem.Filesystem/WatchDir")
	w, err := newWatcher(log, u, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		return fault.Connect(ctx, err)
	}
	defer w.close()
	if !s.track(w) {
		return fault.Connect(ctx, errShutdown)
	}
	defer s.untrack(w)

	if err := stream.Send(&rpc.WatchDirResponse{Event: &rpc.WatchDirResponse_Start{Start: &rpc.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	log.Debug("watch start", telemetry.KeyPath, p, telemetry.KeyRecursive, req.Msg.GetRecursive())

	ticker := time.NewTicker(keepalive(req.Header().Get(KeepaliveHeader)))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fault.Connect(ctx, fmt.Errorf("watch %s: %w", p, ctx.Err()))
			}
			return nil // the client went away: nobody to tell
		case <-w.done:
			return fault.Connect(ctx, errShutdown)
		case <-ticker.C:
			if err := stream.Send(&rpc.WatchDirResponse{Event: &rpc.WatchDirResponse_Keepalive{Keepalive: &rpc.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-w.ready:
			evs, dropped := w.drain()
			if dropped > 0 {
				log.Warn("watch events dropped", telemetry.KeyPath, p, telemetry.KeyDropped, dropped)
			}
			for _, ev := range evs {
				if err := stream.Send(&rpc.WatchDirResponse{Event: &rpc.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
		}
	}
}

// CreateWatcher starts a watcher like WatchDir's whose events are buffered (up to 10 000,
// later ones are dropped and logged) until GetWatcherEvents takes them.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[rpc.CreateWatcherRequest]) (*connect.Response[rpc.CreateWatcherResponse], error) {
	u, p, err := s.resolveReq(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	log := telemetry.Logger(ctx).With(telemetry.KeyRPCMethod, "filesystem.Filesystem/CreateWatcher")
	w, err := newWatcher(log, u, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	id := rand.Text()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		w.close()
		return nil, fault.Connect(ctx, errShutdown)
	}
	s.watchers[id] = w
	s.mu.Unlock()
	log.Info("watcher created", telemetry.KeyWatcherID, id, telemetry.KeyPath, p, telemetry.KeyRecursive, req.Msg.GetRecursive())
	return connect.NewResponse(&rpc.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns and forgets the events a watcher has buffered since the last call.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[rpc.GetWatcherEventsRequest]) (*connect.Response[rpc.GetWatcherEventsResponse], error) {
	w, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	evs, dropped := w.drain()
	if dropped > 0 {
		telemetry.Logger(ctx).Warn("watch events dropped", telemetry.KeyWatcherID, req.Msg.GetWatcherId(), telemetry.KeyPath, w.root, telemetry.KeyDropped, dropped)
	}
	return connect.NewResponse(&rpc.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher stops a watcher and forgets its buffered events.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[rpc.RemoveWatcherRequest]) (*connect.Response[rpc.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	w, ok := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if !ok {
		return nil, fault.Connect(ctx, fmt.Errorf("watcher %q: %w", id, fault.ErrNotFound))
	}
	w.close()
	telemetry.Logger(ctx).Info("watcher removed", telemetry.KeyWatcherID, id, telemetry.KeyPath, w.root)
	return connect.NewResponse(&rpc.RemoveWatcherResponse{}), nil
}

func (s *Service) watcher(id string) (*watcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.watchers[id]
	if !ok {
		return nil, fmt.Errorf("watcher %q: %w", id, fault.ErrNotFound)
	}
	return w, nil
}

func (s *Service) track(w *watcher) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams[w] = struct{}{}
	return true
}

func (s *Service) untrack(w *watcher) {
	s.mu.Lock()
	delete(s.streams, w)
	s.mu.Unlock()
}

var errShutdown = connect.NewError(connect.CodeUnavailable, errors.New("envd is shutting down"))

// keepalive parses the Keepalive-Ping-Interval header (seconds).
func keepalive(h string) time.Duration {
	if n, err := strconv.Atoi(h); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return DefaultKeepalive
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}
