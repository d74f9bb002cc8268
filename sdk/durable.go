package cove

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// ForkOptions are a fork's settings.
type ForkOptions struct {
	// Count is how many copies to start: 1 when 0, at most 20.
	Count int
	// Timeout is each copy's time to live from now; the server's default when 0.
	Timeout time.Duration
}

// ForkResult is one copy of a fork: the sandbox, or why it did not start. Each copy
// succeeds or fails on its own.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// SandboxForkRequest is E2B's, the body of POST /sandboxes/{id}/fork: Fork sends it and the
// server decodes this very type.
type SandboxForkRequest struct {
	Count   *int     `json:"count,omitempty"`   // 1 when absent, at most 20
	Timeout *float64 `json:"timeout,omitempty"` // each copy's, in seconds; the server's default when absent
}

// Fork checkpoints a running sandbox in place (it pauses for that time and keeps its id,
// TTL and processes) and starts copies of it: the same processes, memory and files,
// independent from then on. The error is for the call as a whole.
func (c *Client) Fork(ctx context.Context, sandboxID string, opts ForkOptions) ([]ForkResult, error) {
	body := SandboxForkRequest{Timeout: optSeconds(opts.Timeout)}
	if opts.Count > 0 {
		body.Count = &opts.Count
	}
	var out []struct {
		Sandbox *CreatedSandbox  `json:"sandbox"`
		Error   *json.RawMessage `json:"error"`
	}
	res, err := c.do(ctx, "fork sandbox", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/fork", body, &out)
	if err != nil {
		return nil, err
	}
	results := make([]ForkResult, len(out))
	for i, r := range out {
		switch {
		case r.Error != nil:
			var eb ErrorBody
			_ = json.Unmarshal(*r.Error, &eb)
			results[i].Err = httpError("fork sandbox", sandboxID, eb.Code, *r.Error, res.requestID)
		case r.Sandbox != nil:
			results[i].Sandbox = c.newSandbox(*r.Sandbox, res.requestID)
		default:
			results[i].Err = &Error{Op: "fork sandbox", SandboxID: sandboxID, Message: "the server answered neither a sandbox nor an error", RequestID: res.requestID}
		}
	}
	return results, nil
}

// Fork forks the sandbox (see Client.Fork).
func (s *Sandbox) Fork(ctx context.Context, opts ForkOptions) ([]ForkResult, error) {
	return s.client.Fork(ctx, s.ID, opts)
}

// SnapshotInfo is a snapshot: a sandbox's processes, memory and files kept on disk to start
// new sandboxes from (Create with the snapshot's ID as TemplateID).
type SnapshotInfo struct {
	ID         string    `json:"snapshotID"`
	Names      []string  `json:"names"`
	SandboxID  string    `json:"sandboxID"`
	TemplateID string    `json:"templateID"`
	CreatedAt  time.Time `json:"createdAt"`
	SizeBytes  int64     `json:"sizeBytes"`
}

// CreateSnapshotRequest is the body of POST /sandboxes/{id}/snapshots (E2B's, unnamed there).
type CreateSnapshotRequest struct {
	Name string `json:"name,omitempty"` // at most 128 bytes; none when ""
}

// CreateSnapshot checkpoints a running sandbox in place, as Fork does, and keeps the
// checkpoint as a snapshot; name is optional.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (*SnapshotInfo, error) {
	body := CreateSnapshotRequest{Name: name}
	var out SnapshotInfo
	if _, err := c.do(ctx, "create snapshot", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/snapshots", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SnapshotFilter selects snapshots; empty fields match all of the team's.
type SnapshotFilter struct {
	SandboxID, Name string
}

// ListSnapshots lists the team's snapshots, newest first, every page.
func (c *Client) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]SnapshotInfo, error) {
	var all []SnapshotInfo
	next := ""
	for range 1000 {
		q := url.Values{"limit": {"100"}}
		if f.SandboxID != "" {
			q.Set("sandboxID", f.SandboxID)
		}
		if f.Name != "" {
			q.Set("name", f.Name)
		}
		if next != "" {
			q.Set("nextToken", next)
		}
		var page []SnapshotInfo
		res, err := c.do(ctx, "list snapshots", "", http.MethodGet, "/snapshots?"+q.Encode(), nil, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next = res.header.Get("X-Next-Token"); next == "" {
			return all, nil
		}
	}
	return nil, fmt.Errorf("cove: list snapshots: more than 1000 pages")
}

// DeleteSnapshot deletes a snapshot (ErrNotFound when there is none).
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	_, err := c.do(ctx, "delete snapshot", "", http.MethodDelete, "/snapshots/"+url.PathEscape(snapshotID), nil, nil)
	return err
}

// Volume is a team's named, persistent directory that outlives sandboxes: E2B's Volume
// (VolumeAndToken from Create and Get), with Cove's size and usage beside it. The server
// emits this very type.
type Volume struct {
	ID    string `json:"volumeID"`
	Name  string `json:"name"`
	Token string `json:"token,omitempty"` // for E2B's volume content API (Create and Get)
	// SizeBytes is the volume's quota (writes past it get ENOSPC, uploads 507); 0: none.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// UsedBytes is what its files take (0 for a volume without a size).
	UsedBytes int64 `json:"usedBytes,omitempty"`
}

// VolumeOptions are a new volume's settings beyond its name.
type VolumeOptions struct {
	// SizeMB is the volume's size quota in MiB; 0 takes the server's default
	// (cove server --volume-size-mb).
	SizeMB int `json:"sizeMB,omitempty"`
}

// NewVolume is E2B's, the body of POST /volumes, with Cove's options: CreateVolumeWith sends
// it and the server decodes this very type.
type NewVolume struct {
	Name string `json:"name"`
	VolumeOptions
}

// CreateVolume makes a volume named name (1-63 of [A-Za-z0-9._-]) of the server's default size.
func (c *Client) CreateVolume(ctx context.Context, name string) (*Volume, error) {
	return c.CreateVolumeWith(ctx, name, VolumeOptions{})
}

// CreateVolumeWith makes a volume named name with opts.
func (c *Client) CreateVolumeWith(ctx context.Context, name string, opts VolumeOptions) (*Volume, error) {
	var out Volume
	body := NewVolume{Name: name, VolumeOptions: opts}
	if _, err := c.do(ctx, "create volume", "", http.MethodPost, "/volumes", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetVolume returns a volume by id or name.
func (c *Client) GetVolume(ctx context.Context, id string) (*Volume, error) {
	var out Volume
	if _, err := c.do(ctx, "get volume", "", http.MethodGet, "/volumes/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListVolumes lists the team's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var out []Volume
	if _, err := c.do(ctx, "list volumes", "", http.MethodGet, "/volumes", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteVolume deletes a volume and its files (ErrConflict while a sandbox mounts it).
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	_, err := c.do(ctx, "delete volume", "", http.MethodDelete, "/volumes/"+url.PathEscape(id), nil, nil)
	return err
}
