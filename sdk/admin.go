package cove

import (
	"context"
	"net/http"
	"time"
)

// StoreStatus is one dataset of the server's stores in AdminStatus: what it keeps, for how
// long, and how big it is now.
type StoreStatus struct {
	// Dataset is events, webhook_deliveries, metric_samples, command_records, log_lines or
	// build_logs (templates' build log files: Rows counts logs, Bytes their size).
	Dataset     string    `json:"dataset"`
	TTLSeconds  int64     `json:"ttlSeconds"` // rows older go; 0: no TTL
	MaxRows     int64     `json:"maxRows"`    // past it the oldest go; 0: no cap (lines for log_lines)
	Rows        int64     `json:"rows"`       // now (lines for log_lines)
	Bytes       int64     `json:"bytes"`      // its tables and indexes in the store
	Oldest      time.Time `json:"oldest,omitzero"`
	PrunedTotal int64     `json:"prunedTotal"` // since the server started
	LastPruneAt time.Time `json:"lastPruneAt,omitzero"`
}

// AdminStatus returns every dataset's retention and size (GET /admin/status). It needs
// Config.AdminToken; without it the call is ErrAuth.
func (c *Client) AdminStatus(ctx context.Context) ([]StoreStatus, error) {
	var out []StoreStatus
	_, err := c.do(ctx, "admin status", "", http.MethodGet, "/admin/status", nil, &out)
	return out, err
}

// DiskUsage is what one team's sandboxes paused as snapshots and its snapshots take on the
// server's disk (AdminDisk): the images on disk, zero pages not counted (they are holes).
type DiskUsage struct {
	TeamID string `json:"teamID"`
	// PausedSandboxes are the team's sandboxes paused as a snapshot; PausedBytes their images.
	PausedSandboxes int   `json:"pausedSandboxes"`
	PausedBytes     int64 `json:"pausedBytes"`
	// Snapshots are the team's snapshots (CreateSnapshot); SnapshotBytes their files.
	Snapshots     int   `json:"snapshots"`
	SnapshotBytes int64 `json:"snapshotBytes"`
}

// AdminDisk returns each team's snapshot disk usage, teams with none left out (GET
// /admin/disk). It needs Config.AdminToken; without it the call is ErrAuth.
func (c *Client) AdminDisk(ctx context.Context) ([]DiskUsage, error) {
	var out []DiskUsage
	_, err := c.do(ctx, "admin disk", "", http.MethodGet, "/admin/disk", nil, &out)
	return out, err
}
