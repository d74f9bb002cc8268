package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

func TestListBadParams(t *testing.T) {
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	tests := []struct {
		name  string
		query string
		names string // the parameter the 400's message must name
	}{
		{name: "a garbage nextToken is a 400 naming nextToken", query: "nextToken=" + url.QueryEscape("!!garbage"), names: "nextToken"},
		{name: "a base64 nextToken that is not a cursor is a 400 naming nextToken", query: "nextToken=bm9jb2xvbg", names: "nextToken"},
		{name: "a limit out of range is a 400 naming limit", query: "limit=0", names: "limit"},
		{name: "an unknown state is a 400 naming state", query: "state=dead", names: "state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := c.do(http.MethodGet, "/v2/sandboxes?"+tt.query, nil)
			msg, _ := out["message"].(string)
			if code != http.StatusBadRequest || !strings.Contains(msg, tt.names) {
				t.Fatalf("GET /v2/sandboxes?%s: %d %v, want 400 naming %s", tt.query, code, out, tt.names)
			}
		})
	}
}
