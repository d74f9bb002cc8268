package cove

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/sdk/reason"
)

// TestRequestBodiesKeepTheirWireNames sends every call whose body is a contract type and
// checks the JSON the server receives, field for field: E2B's SDKs send these names, and the
// server decodes the very types, so a renamed field would break both sides at once.
func TestRequestBodiesKeepTheirWireNames(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + " " + string(b)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/sandboxes/sb1/fork":
			_, _ = w.Write([]byte(`[{"sandbox":{"sandboxID":"sb2"}}]`))
		case r.Method == http.MethodPost && r.URL.Path != "/templates/tags":
			_, _ = w.Write([]byte(`{"sandboxID":"sb1"}`))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	c := NewClient(Config{APIURL: srv.URL, APIKey: "k"})
	ctx := context.Background()
	noInternet := NetworkUpdate{NoInternet: true, AllowOut: []string{"198.18.0.1"}, EgressProxy: &EgressProxy{Address: "p:1080"},
		Rules: map[string][]Rule{"api.test": {{Transform: Transform{Headers: map[string]string{"X": "v"}}}}}}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"connect sends its timeout in seconds", func() error { _, err := c.Connect(ctx, "sb1", 90*time.Second); return err },
			`POST /sandboxes/sb1/connect {"timeout":90}`},
		{"connect without a timeout sends an empty object", func() error { _, err := c.Connect(ctx, "sb1", 0); return err },
			`POST /sandboxes/sb1/connect {}`},
		{"resume sends its timeout", func() error { _, err := c.Resume(ctx, "sb1", time.Minute); return err },
			`POST /sandboxes/sb1/resume {"timeout":60}`},
		{"set timeout always sends the timeout", func() error { return c.SetTimeout(ctx, "sb1", 0) },
			`POST /sandboxes/sb1/timeout {"timeout":0}`},
		{"refresh sends its duration", func() error { return c.Refresh(ctx, "sb1", 2*time.Minute) },
			`POST /sandboxes/sb1/refreshes {"duration":120}`},
		{"a filesystem pause asks memory false as E2B's SDKs do", func() error {
			return c.PauseWith(ctx, "sb1", PauseOptions{Kind: reason.PauseFilesystem})
		}, `POST /sandboxes/sb1/pause {"memory":false}`},
		{"a freeze pause names its kind", func() error { return c.PauseWith(ctx, "sb1", PauseOptions{Kind: reason.PauseFreeze}) },
			`POST /sandboxes/sb1/pause {"kind":"freeze"}`},
		{"fork sends count and timeout", func() error {
			_, err := c.Fork(ctx, "sb1", ForkOptions{Count: 1, Timeout: 30 * time.Second})
			return err
		}, `POST /sandboxes/sb1/fork {"count":1,"timeout":30}`},
		{"a snapshot without a name sends an empty object", func() error { _, err := c.CreateSnapshot(ctx, "sb1", ""); return err },
			`POST /sandboxes/sb1/snapshots {}`},
		{"a secret's create sends name, value and metadata", func() error {
			_, err := c.CreateSecret(ctx, "tok", "v", map[string]string{"a": "b"})
			return err
		}, `POST /secrets {"name":"tok","value":"v","metadata":{"a":"b"}}`},
		{"a secret's update with empty metadata clears it", func() error {
			_, err := c.UpdateSecret(ctx, "tok", "v2", map[string]string{})
			return err
		}, `POST /secrets/tok {"value":"v2","metadata":{}}`},
		{"a network update spells allow_internet_access as E2B's API does", func() error { return c.UpdateNetwork(ctx, "sb1", noInternet) },
			`PUT /sandboxes/sb1/network {"allow_internet_access":false,"allowOut":["198.18.0.1"],"egressProxy":{"address":"p:1080"},"rules":{"api.test":[{"transform":{"headers":{"X":"v"}}}]}}`},
		{"a tag names its target", func() error { return c.TagTemplate(ctx, "web:v1", "prod") },
			`POST /templates/tags {"target":"web:v1","tags":["prod"]}`},
		{"an untag names the template", func() error { return c.UntagTemplate(ctx, "web", "prod") },
			`DELETE /templates/tags {"name":"web","tags":["prod"]}`},
	}
	for _, tt := range tests {
		// Sequential: the server hands each body back through one channel.
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err != nil {
				t.Error(err)
			}
			if g := strings.TrimSuffix(<-got, "\n"); g != tt.want {
				t.Errorf("\n got %s\nwant %s", g, tt.want)
			}
		})
	}
}
