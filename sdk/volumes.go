package cove

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// VolumeFileType is the kind of a volume entry: E2B's VolumeFileType.
type VolumeFileType string

// The volume entry kinds.
const (
	VolumeFileUnknown   VolumeFileType = "unknown"
	VolumeFileFile      VolumeFileType = "file"
	VolumeFileDirectory VolumeFileType = "directory"
	VolumeFileSymlink   VolumeFileType = "symlink"
)

// String returns the type's wire name ("unknown" for the zero value).
func (t VolumeFileType) String() string {
	if t == "" {
		return string(VolumeFileUnknown)
	}
	return string(t)
}

// ParseVolumeFileType reads a wire name, rejecting unknown ones.
func ParseVolumeFileType(s string) (VolumeFileType, error) {
	switch t := VolumeFileType(s); t {
	case VolumeFileUnknown, VolumeFileFile, VolumeFileDirectory, VolumeFileSymlink:
		return t, nil
	}
	return "", fmt.Errorf("cove: unknown volume file type %q", s)
}

// VolumeFileTypeOf is the type of a file mode.
func VolumeFileTypeOf(m fs.FileMode) VolumeFileType {
	switch {
	case m.IsRegular():
		return VolumeFileFile
	case m.IsDir():
		return VolumeFileDirectory
	case m&fs.ModeSymlink != 0:
		return VolumeFileSymlink
	}
	return VolumeFileUnknown
}

// VolumeEntry is a file or directory of a volume: E2B's VolumeEntryStat. The server emits
// this very type.
type VolumeEntry struct {
	Name   string         `json:"name"`
	Path   string         `json:"path"` // in the volume: "/dir/file"
	Type   VolumeFileType `json:"type"`
	Size   int64          `json:"size"`
	Mode   uint32         `json:"mode"` // permission bits (0o644)
	UID    uint32         `json:"uid"`
	GID    uint32         `json:"gid"`
	Atime  time.Time      `json:"atime"`
	Mtime  time.Time      `json:"mtime"`
	Ctime  time.Time      `json:"ctime"`
	Target string         `json:"target,omitempty"` // a symlink's target
}

// VolumeMetadata is the owner and mode updateMetadata and the write options set; nil
// leaves a field alone (new files and directories belong to uid and gid 1000, the
// sandboxes' default user).
type VolumeMetadata struct {
	UID  *uint32 `json:"uid,omitempty"`
	GID  *uint32 `json:"gid,omitempty"`
	Mode *uint32 `json:"mode,omitempty"`
}

// VolumeWriteOptions are MakeDir's and Write's options.
type VolumeWriteOptions struct {
	VolumeMetadata
	// Force makes missing parent directories (and MakeDir of an existing directory no error).
	Force bool
}

// VolumeFiles is the content of one volume, through E2B's volume content API
// (/volumecontent/{volumeID}/...): what the npm SDK's Volume instance methods do. Paths
// are the volume's own ("/dir/file"); one that leads out of the volume is a 400.
type VolumeFiles struct {
	c      *Client
	volume string
}

// VolumeFiles returns the content of volume (its id, or its name: the client
// authenticates with the API key, not the volume's token).
func (c *Client) VolumeFiles(volume string) *VolumeFiles {
	return &VolumeFiles{c: c, volume: volume}
}

// call sends one content API request and returns the answer's body for the caller to
// close, or the error the answer carried (ErrNotFound for a missing path, ErrNoSpace when
// the volume is full).
func (v *VolumeFiles) call(ctx context.Context, op, method, kind string, q url.Values, body io.Reader, contentType string) (io.ReadCloser, error) {
	ctx, ci := newCall(ctx, "")
	ctx, cancel := v.c.withTimeout(ctx)
	u := v.c.cfg.APIURL + "/volumecontent/" + url.PathEscape(v.volume) + "/" + kind + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		cancel()
		return nil, &Error{Op: op, Message: err.Error(), RequestID: ci.requestID, Err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if v.c.cfg.APIKey != "" {
		req.Header.Set("X-API-Key", v.c.cfg.APIKey)
	}
	resp, err := v.c.http.Do(req)
	if err != nil {
		cancel()
		return nil, transportError(ctx, op, "", ci.requestID, err)
	}
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		cancel()
		return nil, httpError(op, "", resp.StatusCode, b, ci.requestID)
	}
	return cancelOnClose{resp.Body, cancel}, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// callJSON is call with a JSON answer decoded into out.
func (v *VolumeFiles) callJSON(ctx context.Context, op, method, kind string, q url.Values, body io.Reader, contentType string, out any) error {
	rc, err := v.call(ctx, op, method, kind, q, body, contentType)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := json.NewDecoder(rc).Decode(out); err != nil {
		return &Error{Op: op, Message: fmt.Sprintf("decode answer: %v", err), Err: err}
	}
	return nil
}

func pathQuery(path string, opts *VolumeWriteOptions) url.Values {
	q := url.Values{"path": {path}}
	if opts != nil {
		if opts.UID != nil {
			q.Set("uid", strconv.FormatUint(uint64(*opts.UID), 10))
		}
		if opts.GID != nil {
			q.Set("gid", strconv.FormatUint(uint64(*opts.GID), 10))
		}
		if opts.Mode != nil {
			q.Set("mode", strconv.FormatUint(uint64(*opts.Mode), 10))
		}
		if opts.Force {
			q.Set("force", "true")
		}
	}
	return q
}

// List returns the entries of the directory path, depth levels deep (0 or 1: its own).
func (v *VolumeFiles) List(ctx context.Context, path string, depth int) ([]VolumeEntry, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out []VolumeEntry
	err := v.callJSON(ctx, "list volume "+path, http.MethodGet, "dir", q, nil, "", &out)
	return out, err
}

// Stat returns the entry at path (ErrNotFound when there is none).
func (v *VolumeFiles) Stat(ctx context.Context, path string) (*VolumeEntry, error) {
	var out VolumeEntry
	if err := v.callJSON(ctx, "stat volume "+path, http.MethodGet, "path", url.Values{"path": {path}}, nil, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MakeDir makes the directory path (its parents too with opts.Force).
func (v *VolumeFiles) MakeDir(ctx context.Context, path string, opts VolumeWriteOptions) (*VolumeEntry, error) {
	var out VolumeEntry
	if err := v.callJSON(ctx, "make volume dir "+path, http.MethodPost, "dir", pathQuery(path, &opts), nil, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetMetadata changes path's owner and mode.
func (v *VolumeFiles) SetMetadata(ctx context.Context, path string, md VolumeMetadata) (*VolumeEntry, error) {
	b, _ := json.Marshal(md)
	var out VolumeEntry
	if err := v.callJSON(ctx, "update volume "+path, http.MethodPatch, "path", url.Values{"path": {path}}, bytes.NewReader(b), "application/json", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Open streams the file path; close it after use.
func (v *VolumeFiles) Open(ctx context.Context, path string) (io.ReadCloser, error) {
	return v.call(ctx, "read volume "+path, http.MethodGet, "file", url.Values{"path": {path}}, nil, "")
}

// Read returns the file path's bytes.
func (v *VolumeFiles) Read(ctx context.Context, path string) ([]byte, error) {
	rc, err := v.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// Write writes r to the file path, replacing what it held, all or nothing (ErrNoSpace past
// the volume's size, and the file stays as it was).
func (v *VolumeFiles) Write(ctx context.Context, path string, r io.Reader, opts VolumeWriteOptions) (*VolumeEntry, error) {
	var out VolumeEntry
	if err := v.callJSON(ctx, "write volume "+path, http.MethodPut, "file", pathQuery(path, &opts), r, "application/octet-stream", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Remove removes path, a directory with what it holds (ErrNotFound when there is none).
func (v *VolumeFiles) Remove(ctx context.Context, path string) error {
	rc, err := v.call(ctx, "remove volume "+path, http.MethodDelete, "path", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return err
	}
	return rc.Close()
}
