package cove

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/sdk/reason"
)

func TestNewRequestID(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^[0-9a-hjkmnp-tv-z]{20}$`)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = NewRequestID()
		if !re.MatchString(ids[i]) {
			t.Fatalf("id %q is not 20 characters of Crockford base32", ids[i])
		}
	}
	if !slices.IsSorted(ids) {
		t.Error("ids minted in order do not sort in order")
	}
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Error("duplicate ids")
	}
}

func TestHTTPErrorReadsKilledSandboxes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		body   string
		want   reason.KillReason
	}{
		{"the API's 404 message names the reason", 404,
			`{"code":404,"message":"get sandbox ia: sandbox ia was killed: timeout at 2026-01-02T03:04:05Z (request id r1)","requestId":"r1"}`, reason.KillTimeout},
		{"the proxy's 502 carries killReason", 502,
			`{"code":502,"message":"sandbox ia was killed: oom at 2026-01-02T03:04:05Z","sandboxId":"ia","state":"killed","killReason":"oom","requestId":"r1"}`, reason.KillOOM},
		{"the proxy's 502 with E2B's message has Cove's in detail", 502,
			`{"code":502,"message":"The sandbox was not found","detail":"sandbox ia was killed: oom at 2026-01-02T03:04:05Z (request id r1)","sandboxId":"ia","state":"killed","killReason":"oom","requestId":"r1"}`, reason.KillOOM},
		{"an unknown reason reads as unknown", 404,
			`{"code":404,"message":"sandbox ia was killed: cosmic_ray at 2026-01-02T03:04:05Z"}`, reason.KillUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := httpError("op", "ia", tc.status, []byte(tc.body), "r1")
			var k *SandboxKilledError
			if !errors.As(err, &k) || k.Reason != tc.want || k.SandboxID != "ia" || k.RequestID != "r1" {
				t.Fatalf("httpError: %#v, want killed %s", err, tc.want)
			}
			if !errors.Is(err, ErrNotFound) {
				t.Error("a killed sandbox does not match ErrNotFound")
			}
			if want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC); !k.At.Equal(want) {
				t.Errorf("At = %v, want %v", k.At, want)
			}
		})
	}
	t.Run("statuses map to sentinels", func(t *testing.T) {
		for status, want := range map[int]error{404: ErrNotFound, 401: ErrAuth, 409: ErrConflict, 429: ErrRateLimit, 504: ErrTimeout} {
			if err := httpError("op", "", status, []byte(`{"code":1,"message":"m"}`), "r"); !errors.Is(err, want) || RequestIDOf(err) != "r" {
				t.Errorf("status %d: %v, want %v with request id r", status, err, want)
			}
		}
		if err := httpError("op", "", http.StatusInternalServerError, []byte("boom"), "r"); err.Error() != "cove: op: boom (request id r)" {
			t.Errorf("500: %q", err)
		}
	})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	done := func(f func() (context.Context, func())) context.Context {
		ctx, end := f()
		end()
		return ctx
	}
	cases := []struct {
		name string
		ctx  context.Context
		want reason.CancelCause
	}{
		{"Disconnect's cause is disconnect", done(func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(ErrDisconnect) }
		}), reason.CancelDisconnect},
		{"NotifyExit's stop is caller_exit", done(func() (context.Context, func()) {
			return NotifyExit(context.Background())
		}), reason.CancelCallerExit},
		{"a plain cancel is sibling_cancel", done(func() (context.Context, func()) {
			return context.WithCancel(context.Background())
		}), reason.CancelSibling},
		{"a passed deadline is timeout", done(func() (context.Context, func()) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
			<-ctx.Done()
			return ctx, cancel
		}), reason.CancelTimeout},
		{"ErrTimeout as a cause is timeout", done(func() (context.Context, func()) {
			ctx, cancel := context.WithTimeoutCause(context.Background(), time.Nanosecond, ErrTimeout)
			<-ctx.Done()
			return ctx, cancel
		}), reason.CancelTimeout},
		{"a live context is rpc_error", context.Background(), reason.CancelRPCError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := classify(tc.ctx, errors.New("stream broke")); got != tc.want {
				t.Errorf("classify = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	t.Setenv("COVE_API_URL", "")
	t.Setenv("E2B_API_URL", "http://e2b:1/")
	t.Setenv("COVE_API_KEY", "cove-key")
	t.Setenv("E2B_API_KEY", "e2b-key")
	t.Setenv("COVE_SANDBOX_URL", "")
	t.Setenv("E2B_SANDBOX_URL", "")
	cfg := NewClient(Config{}).Config()
	if cfg.APIURL != "http://e2b:1" || cfg.SandboxURL != "http://e2b:1" || cfg.APIKey != "cove-key" {
		t.Errorf("config %+v: want E2B_API_URL for both URLs and COVE_API_KEY over E2B_API_KEY", cfg)
	}
	if cfg.RequestTimeout != DefaultRequestTimeout || cfg.Logger == nil {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	if got := NewClient(Config{APIKey: "explicit"}).Config().APIKey; got != "explicit" {
		t.Errorf("an explicit key lost to the environment: %q", got)
	}
}

func TestEchoedRequestIDIsChecked(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderRequestID) == "" {
			t.Error("no request id sent")
		}
		w.Header().Set(HeaderRequestID, "someone-else")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sandboxID":"ia","templateID":"base","state":"running"}`))
	}))
	defer srv.Close()
	var logs strings.Builder
	c := NewClient(Config{APIURL: srv.URL, APIKey: "k", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	info, err := c.Info(WithRequestID(context.Background(), "mine"), "ia")
	if err != nil {
		t.Fatal(err)
	}
	if info.RequestID() != "mine" {
		t.Errorf("RequestID() = %q, want mine", info.RequestID())
	}
	if !strings.Contains(logs.String(), "request id mismatch") || !strings.Contains(logs.String(), "someone-else") {
		t.Errorf("no mismatch warning in %q", logs.String())
	}
}
