package teamroutes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store"
)

func TestStatusOfMapsEveryErrorKindOnce(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"a bad request is 400", BadRequest("since: %v", "not a time"), http.StatusBadRequest},
		{"a forged page token is 400", fmt.Errorf("list: %w", store.ErrBadCursor), http.StatusBadRequest},
		{"no team is 401", fmt.Errorf("%w: no team", ErrUnauthorized), http.StatusUnauthorized},
		{"a missing record is 404", fmt.Errorf("webhook w1: %w", store.ErrNotFound), http.StatusNotFound},
		{"a conflict is 409", fmt.Errorf("name taken: %w", store.ErrConflict), http.StatusConflict},
		{"anything else is 500", errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errdefs.Status(tt.err); got != tt.want {
				t.Errorf("errdefs.Status(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestQueryParametersAreReadOnceForEveryTeamAPI(t *testing.T) {
	tests := []struct {
		name, query string
		read        func(url.Values) (any, error)
		want        any
		wantErr     string
	}{
		{"an absent limit is the default", "", limit, 100, ""},
		{"a limit in range is kept", "limit=1000", limit, 1000, ""},
		{"a limit past the most is refused naming it", "limit=1001", limit, nil, `limit "1001": want 1..1000`},
		{"a limit that is no number is refused", "limit=ten", limit, nil, `limit "ten": want 1..1000`},
		{"an absent choice is the first", "", direction, "forward", ""},
		{"a listed choice is kept", "direction=backward", direction, "backward", ""},
		{"another value is refused naming the choices", "direction=up", direction, nil, `direction "up": want forward or backward`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tt.read(q)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errdefs.Status(err) != http.StatusBadRequest {
					t.Errorf("got %v, %v; want a 400 saying %q", got, err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func limit(q url.Values) (any, error) {
	n, err := Limit(q, 100, 1000)
	if err != nil {
		return nil, err
	}
	return n, nil
}

func direction(q url.Values) (any, error) {
	s, err := OneOf(q, "direction", "forward", "backward")
	if err != nil {
		return nil, err
	}
	return s, nil
}

func TestACursorReadsBackItsPositionAndRefusesForgeries(t *testing.T) {
	at := time.Date(2026, 12, 4, 8, 0, 0, 123456000, time.UTC)
	tok := EncodeCursor(at, "ev_1:x")
	if got, key, err := DecodeCursor(tok); err != nil || !got.Equal(at) || key != "ev_1:x" {
		t.Errorf("DecodeCursor(EncodeCursor) = %v, %q, %v", got, key, err)
	}
	for _, bad := range []string{"!!", "MTIz", EncodeCursor(at, "")} {
		if _, _, err := DecodeCursor(bad); err == nil {
			t.Errorf("DecodeCursor(%q) accepted a token EncodeCursor never makes", bad)
		}
	}
}

// serve serves cfg's routes through the chain as the API serves them; the caller's team comes
// from an X-Team header, standing in for an API key.
func serve(cfg Config) http.Handler {
	return httpx.Chain{Edge: "api", Authenticate: func(r *http.Request, _ httpx.Auth) (context.Context, error) {
		team := r.Header.Get("X-Team")
		if team == "" {
			return nil, fmt.Errorf("%w: missing API key", httpx.ErrUnauthorized)
		}
		return authz.With(r.Context(), authz.Caller{TeamID: team, KeyID: "k_" + team}), nil
	}}.Routes(Routes(cfg))
}
