package cove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/sdk/envdapi"
	fspb "github.com/cove-dev/cove/sdk/gen/filesystem"
)

// Files reads and writes the sandbox's filesystem. Relative paths are relative to the
// user's home. Every call reads the User option.
type Files struct{ e *envd }

// FileType is what an entry is.
type FileType string

// The file types.
const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
)

// EntryInfo describes a file or directory.
type EntryInfo struct {
	Name          string
	Type          FileType
	Path          string
	Size          int64
	Mode          os.FileMode
	Permissions   string // "-rw-r--r--"
	Owner, Group  string
	ModifiedTime  time.Time
	SymlinkTarget string
	Metadata      map[string]string

	requestID string
}

// RequestID returns the request id of the call that returned the entry.
func (e *EntryInfo) RequestID() string { return e.requestID }

func entryOf(x *fspb.EntryInfo, requestID string) *EntryInfo {
	if x == nil {
		return nil
	}
	e := &EntryInfo{
		Name: x.GetName(), Path: x.GetPath(), Size: x.GetSize(), Mode: os.FileMode(x.GetMode()),
		Permissions: x.GetPermissions(), Owner: x.GetOwner(), Group: x.GetGroup(),
		SymlinkTarget: x.GetSymlinkTarget(), Metadata: x.GetMetadata(), requestID: requestID,
	}
	switch x.GetType() {
	case fspb.FileType_FILE_TYPE_FILE:
		e.Type = TypeFile
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		e.Type = TypeDir
	case fspb.FileType_FILE_TYPE_SYMLINK:
		e.Type = TypeSymlink
	}
	if t := x.GetModifiedTime(); t != nil {
		e.ModifiedTime = t.AsTime()
	}
	return e
}

func filesQuery(path string, o *options) string {
	q := url.Values{"path": {path}}
	if o.user != "" {
		q.Set("username", o.user)
	}
	return "/files?" + q.Encode()
}

// Open opens a file for reading; the caller closes it. The request timeout covers the
// whole read.
func (f *Files) Open(ctx context.Context, path string, opts ...Option) (io.ReadCloser, error) {
	resp, _, err := f.e.httpDo(ctx, "read file "+path, http.MethodGet, filesQuery(path, apply(opts)), nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Read returns a file's content.
func (f *Files) Read(ctx context.Context, path string, opts ...Option) ([]byte, error) {
	resp, ci, err := f.e.httpDo(ctx, "read file "+path, http.MethodGet, filesQuery(path, apply(opts)), nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, transportError(ctx, "read file "+path, f.e.sandboxID, ci.requestID, err)
	}
	return b, nil
}

// Write writes data to a file, making its parent directories, and replaces what was
// there.
func (f *Files) Write(ctx context.Context, path string, data []byte, opts ...Option) (*EntryInfo, error) {
	return f.WriteFrom(ctx, path, bytes.NewReader(data), opts...)
}

// WriteFrom writes everything r yields to a file, streaming it.
func (f *Files) WriteFrom(ctx context.Context, path string, r io.Reader, opts ...Option) (*EntryInfo, error) {
	op := "write file " + path
	o := apply(opts)
	header := http.Header{"Content-Type": {"application/octet-stream"}}
	for k, v := range o.metadata {
		header.Set(envdapi.MetadataHeaderPrefix+k, v)
	}
	resp, ci, err := f.e.httpDo(ctx, op, http.MethodPost, filesQuery(path, o), r, header)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var written []envdapi.FileEntry
	if err := json.NewDecoder(resp.Body).Decode(&written); err != nil || len(written) == 0 {
		return &EntryInfo{Name: baseName(path), Type: TypeFile, Path: path, requestID: ci.requestID}, nil
	}
	w := written[0]
	return &EntryInfo{Name: w.Name, Type: FileType(w.Type), Path: w.Path, Metadata: w.Metadata, requestID: ci.requestID}, nil
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// List lists a directory; the Depth option descends further.
func (f *Files) List(ctx context.Context, path string, opts ...Option) ([]*EntryInfo, error) {
	o := apply(opts)
	depth := o.depth
	if depth == 0 {
		depth = 1
	}
	resp, id, err := unary(ctx, f.e, "list "+path, o.user, func(ctx context.Context) (*connect.Response[fspb.ListDirResponse], error) {
		return f.e.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: path, Depth: depth}))
	})
	if err != nil {
		return nil, err
	}
	out := make([]*EntryInfo, 0, len(resp.Msg.GetEntries()))
	for _, x := range resp.Msg.GetEntries() {
		out = append(out, entryOf(x, id))
	}
	return out, nil
}

// Stat describes a file or directory; ErrNotFound when there is none.
func (f *Files) Stat(ctx context.Context, path string, opts ...Option) (*EntryInfo, error) {
	o := apply(opts)
	resp, id, err := unary(ctx, f.e, "stat "+path, o.user, func(ctx context.Context) (*connect.Response[fspb.StatResponse], error) {
		return f.e.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: path}))
	})
	if err != nil {
		return nil, err
	}
	return entryOf(resp.Msg.GetEntry(), id), nil
}

// Exists reports whether path exists.
func (f *Files) Exists(ctx context.Context, path string, opts ...Option) (bool, error) {
	_, err := f.Stat(ctx, path, opts...)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		var killed *SandboxKilledError
		if errors.As(err, &killed) {
			return false, err
		}
		return false, nil
	}
	return false, err
}

// MakeDir makes a directory and its parents. It reports false when the directory was
// there already.
func (f *Files) MakeDir(ctx context.Context, path string, opts ...Option) (bool, error) {
	o := apply(opts)
	_, _, err := unary(ctx, f.e, "make directory "+path, o.user, func(ctx context.Context) (*connect.Response[fspb.MakeDirResponse], error) {
		return f.e.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: path}))
	})
	var e *Error
	if errors.As(err, &e) && e.Code == connect.CodeAlreadyExists.String() {
		return false, nil
	}
	return err == nil, err
}

// Rename moves oldPath to newPath.
func (f *Files) Rename(ctx context.Context, oldPath, newPath string, opts ...Option) (*EntryInfo, error) {
	o := apply(opts)
	resp, id, err := unary(ctx, f.e, "rename "+oldPath, o.user, func(ctx context.Context) (*connect.Response[fspb.MoveResponse], error) {
		return f.e.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: oldPath, Destination: newPath}))
	})
	if err != nil {
		return nil, err
	}
	return entryOf(resp.Msg.GetEntry(), id), nil
}

// Remove removes a file or a directory with everything in it.
func (f *Files) Remove(ctx context.Context, path string, opts ...Option) error {
	o := apply(opts)
	_, _, err := unary(ctx, f.e, "remove "+path, o.user, func(ctx context.Context) (*connect.Response[fspb.RemoveResponse], error) {
		return f.e.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: path}))
	})
	return err
}

// EventType is what happened to a watched file.
type EventType string

// The event types.
const (
	EventCreate EventType = "create"
	EventWrite  EventType = "write"
	EventRemove EventType = "remove"
	EventRename EventType = "rename"
	EventChmod  EventType = "chmod"
)

// FilesystemEvent is one change in a watched directory.
type FilesystemEvent struct {
	Name string    `json:"name"` // relative to the watched directory
	Type EventType `json:"type"`
}

// Watcher watches a directory until Stop or its context ends.
type Watcher struct {
	events    chan FilesystemEvent
	cancel    context.CancelCauseFunc
	done      chan struct{}
	requestID string

	mu  sync.Mutex
	err error
}

// Events delivers the changes; it is closed when the watch ends.
func (w *Watcher) Events() <-chan FilesystemEvent { return w.events }

// Stop ends the watch and waits for it to end.
func (w *Watcher) Stop() {
	w.cancel(errWatchStopped)
	<-w.done
}

// Err returns why the watch ended, nil after Stop.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// RequestID returns the request id of the watch's stream.
func (w *Watcher) RequestID() string { return w.requestID }

var errWatchStopped = errors.New("cove: watch stopped")

// Watch watches a directory (and its subdirectories with Recursive) and returns once the
// watch is in place. Events must be read, or the watch stalls.
func (f *Files) Watch(ctx context.Context, path string, opts ...Option) (*Watcher, error) {
	o := apply(opts)
	ctx, ci := newCall(ctx, o.user)
	ctx, cancel := context.WithCancelCause(ctx)
	w := &Watcher{events: make(chan FilesystemEvent, 64), cancel: cancel, done: make(chan struct{}), requestID: ci.requestID}
	op := "watch " + path
	req := connect.NewRequest(&fspb.WatchDirRequest{Path: path, Recursive: o.recursive})
	req.Header().Set(headerKeepalive, keepaliveSeconds)
	stream, err := f.e.fs.WatchDir(ctx, req)
	if err != nil {
		cancel(nil)
		return nil, rpcError(ctx, op, f.e.sandboxID, ci, err)
	}
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			err = errors.New("the watch stream closed before it started")
		}
		stream.Close()
		cancel(nil)
		return nil, rpcError(ctx, op, f.e.sandboxID, ci, err)
	}
	go func() {
		defer close(w.done)
		defer close(w.events)
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Msg().GetFilesystem()
			if ev == nil {
				continue
			}
			fe := FilesystemEvent{Name: ev.GetName(), Type: eventType(ev.GetType())}
			select {
			case w.events <- fe:
			case <-ctx.Done():
			}
		}
		var werr error
		if err := stream.Err(); err != nil && !errors.Is(context.Cause(ctx), errWatchStopped) {
			werr = rpcError(ctx, op, f.e.sandboxID, ci, err)
		}
		w.mu.Lock()
		w.err = werr
		w.mu.Unlock()
	}()
	return w, nil
}

func eventType(t fspb.EventType) EventType {
	switch t {
	case fspb.EventType_EVENT_TYPE_CREATE:
		return EventCreate
	case fspb.EventType_EVENT_TYPE_WRITE:
		return EventWrite
	case fspb.EventType_EVENT_TYPE_REMOVE:
		return EventRemove
	case fspb.EventType_EVENT_TYPE_RENAME:
		return EventRename
	case fspb.EventType_EVENT_TYPE_CHMOD:
		return EventChmod
	}
	return EventType(strings.ToLower(strings.TrimPrefix(t.String(), "EVENT_TYPE_")))
}
