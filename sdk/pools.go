package cove

import (
	"context"
	"net/http"
	"net/url"
)

// Pool is one template's warm pool: sandboxes started and ready for creates to claim.
type Pool struct {
	Template string `json:"template"`
	// Size is how many the server keeps ready; Ready is how many are now.
	Size  int `json:"size"`
	Ready int `json:"ready"`
	// LastError is why the last refill failed ("" when it did not).
	LastError string `json:"lastError,omitempty"`
}

// PoolSize is the body that sizes a pool (PUT /templates/{template}/pool).
type PoolSize struct {
	Size *int `json:"size"`
}

// SetTemplatePool keeps size started sandboxes of template ready for creates to claim (0:
// none), from now on and across server restarts. A team sizes the pools of its own
// templates; with Config.AdminToken the call is the operator's (PUT
// /admin/templates/{template}/pool) and sizes any template's, such as base.
func (c *Client) SetTemplatePool(ctx context.Context, template string, size int) (*Pool, error) {
	path := "/templates/" + url.PathEscape(template) + "/pool"
	if c.cfg.AdminToken != "" {
		path = "/admin" + path
	}
	var out Pool
	_, err := c.do(ctx, "set template pool", "", http.MethodPut, path, PoolSize{Size: &size}, &out)
	return &out, err
}

// Pools lists the warm pools: the team's templates' and the ones it may create from (GET
// /pools), or every pool with Config.AdminToken (GET /admin/pools).
func (c *Client) Pools(ctx context.Context) ([]Pool, error) {
	path := "/pools"
	if c.cfg.AdminToken != "" {
		path = "/admin/pools"
	}
	var out []Pool
	_, err := c.do(ctx, "list pools", "", http.MethodGet, path, nil, &out)
	return out, err
}
