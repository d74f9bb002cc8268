package cove

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Node is one cove server of a cluster as GET /admin/nodes lists it: its state, capacity,
// what placement reserved on it, and its lease.
type Node struct {
	Name         string     `json:"name"`
	AdvertiseURL string     `json:"advertiseUrl"`
	State        string     `json:"state"` // active, draining, lost, left
	VCPUs        int        `json:"vcpus"`
	MemoryMB     int64      `json:"memoryMB"`
	DiskMB       int64      `json:"diskMB"`
	MaxSandboxes int        `json:"maxSandboxes"`
	MaxStarts    int        `json:"maxStarts"`
	UsedVCPUs    int        `json:"usedVcpus"`
	UsedMemoryMB int64      `json:"usedMemoryMB"`
	Sandboxes    int        `json:"sandboxes"`
	Starting     int        `json:"starting"`
	Templates    []string   `json:"templates"`
	Version      string     `json:"version"`
	RegisteredAt time.Time  `json:"registeredAt"`
	HeartbeatAt  time.Time  `json:"heartbeatAt"`
	LeaseUntil   time.Time  `json:"leaseUntil"`
	LostAt       *time.Time `json:"lostAt,omitempty"`
}

// Nodes lists the cluster's nodes (GET /admin/nodes). It needs Config.AdminToken; a server
// that is no cluster node answers ErrNotFound.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var out []Node
	_, err := c.do(ctx, "list nodes", "", http.MethodGet, "/admin/nodes", nil, &out)
	return out, err
}

// DrainNode stops placement on the node (POST /admin/nodes/{name}/drain): it takes no new
// sandboxes. ActivateNode undoes it.
func (c *Client) DrainNode(ctx context.Context, name string) (*Node, error) {
	var out Node
	_, err := c.do(ctx, "drain node", "", http.MethodPost, "/admin/nodes/"+url.PathEscape(name)+"/drain", nil, &out)
	return &out, err
}

// ActivateNode lets a drained node take new sandboxes again (POST /admin/nodes/{name}/activate).
func (c *Client) ActivateNode(ctx context.Context, name string) (*Node, error) {
	var out Node
	_, err := c.do(ctx, "activate node", "", http.MethodPost, "/admin/nodes/"+url.PathEscape(name)+"/activate", nil, &out)
	return &out, err
}
