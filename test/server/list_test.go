package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
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
		{name: "an unknown order is a 400 naming order", query: "order=sideways", names: "order"},
		{name: "a startedAfter that is not a timestamp is a 400 naming startedAfter", query: "startedAfter=yesterday", names: "startedAfter"},
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

func TestListOrderAndFilters(t *testing.T) {
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	first := c.create(nil)
	second := c.create(nil)
	list := func(t *testing.T, query string) []string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/v2/sandboxes?"+query, nil)
		req.Header.Set("X-API-Key", s.Key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out []struct {
			SandboxID string `json:"sandboxID"`
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /v2/sandboxes?%s: %d", query, res.StatusCode)
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range out {
			ids = append(ids, sb.SandboxID)
		}
		return ids
	}
	tests := []struct {
		name  string
		query string
		want  []string
	}{
		{name: "the default order is newest first", query: "", want: []string{second, first}},
		{name: "order=asc is oldest first", query: "order=asc", want: []string{first, second}},
		{name: "template=base matches by template id", query: "template=base&order=asc", want: []string{first, second}},
		{name: "an unknown template matches nothing", query: "template=nope", want: nil},
		{name: "startedAfter in the future matches nothing", query: "startedAfter=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), want: nil},
		{name: "startedAfter in the past matches both", query: "startedAfter=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)), want: []string{second, first}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := list(t, tt.query); !slices.Equal(got, tt.want) {
				t.Fatalf("GET /v2/sandboxes?%s = %v, want %v", tt.query, got, tt.want)
			}
		})
	}
	t.Run("the Go SDK lists oldest first by template and newest first by default", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sdk := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
		for _, tc := range []struct {
			opts cove.ListOptions
			want []string
		}{
			{cove.ListOptions{Order: cove.OldestFirst, Template: "base", PageSize: 1}, []string{first, second}},
			{cove.ListOptions{PageSize: 1}, []string{second, first}},
			{cove.ListOptions{StartedAfter: time.Now().Add(time.Hour)}, nil},
		} {
			var got []string
			for info, err := range sdk.List(ctx, tc.opts) {
				if err != nil {
					t.Fatalf("List(%+v): %v", tc.opts, err)
				}
				got = append(got, info.SandboxID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%+v) = %v, want %v", tc.opts, got, tc.want)
			}
		}
	})

	t.Run("cove sandbox list takes --order, --template and --started-after", func(t *testing.T) {
		t.Setenv("COVE_API_KEY", s.Key)
		out := cli(t, s, "sandbox", "list", "--order", "asc", "--template", "base",
			"--started-after", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--json")
		var infos []struct {
			SandboxID string `json:"sandboxID"`
		}
		if err := json.Unmarshal([]byte(out), &infos); err != nil {
			t.Fatalf("cove sandbox list --json: %v\n%s", err, out)
		}
		var got []string
		for _, i := range infos {
			got = append(got, i.SandboxID)
		}
		if want := []string{first, second}; !slices.Equal(got, want) {
			t.Errorf("cove sandbox list --order asc = %v, want %v", got, want)
		}
	})

	t.Run("pages of one follow nextToken in both orders", func(t *testing.T) {
		for _, order := range []string{"asc", "desc"} {
			var got []string
			next := ""
			for range 5 {
				q := "limit=1&order=" + order
				if next != "" {
					q += "&nextToken=" + url.QueryEscape(next)
				}
				code, _, hdr := c.do(http.MethodGet, "/v2/sandboxes?"+q, nil)
				if code != http.StatusOK {
					t.Fatalf("%s: %d", q, code)
				}
				got = append(got, list(t, q)...)
				if next = hdr.Get("X-Next-Token"); next == "" {
					break
				}
			}
			want := []string{first, second}
			if order == "desc" {
				want = []string{second, first}
			}
			if !slices.Equal(got, want) {
				t.Errorf("order %s: pages gave %v, want %v", order, got, want)
			}
		}
	})
}
