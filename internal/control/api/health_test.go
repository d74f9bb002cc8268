package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		header []string
		status int
	}{
		{name: "GET /health answers 204 without an API key", method: "GET", header: []string{"X-API-Key", ""}, status: http.StatusNoContent},
		{name: "GET /health answers 204 with an API key", method: "GET", status: http.StatusNoContent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, tt.method, "/health", "", tt.header...)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
		})
	}

	t.Run("the Go SDK's Health is nil against a live server and an error against a dead one", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cove.NewClient(cove.Config{APIURL: e.url}).Health(ctx); err != nil {
			t.Fatalf("Health on a live server: %v", err)
		}
		err := cove.NewClient(cove.Config{APIURL: e.url + "/nowhere"}).Health(ctx)
		var ce *cove.Error
		if !errors.As(err, &ce) {
			t.Fatalf("Health on a path with no server: %v, want a *cove.Error", err)
		}
	})
}
