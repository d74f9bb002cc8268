package cove

import (
	"cmp"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cove-dev/cove/sdk/envdapi"
)

// Config says how to reach Cove. Empty fields are read from the environment: COVE_API_URL,
// COVE_SANDBOX_URL and COVE_API_KEY first, then the official E2B SDK's E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY, so one set of variables serves both SDKs.
type Config struct {
	// APIURL is the REST API: http://127.0.0.1:3000 when neither it nor a variable is set.
	APIURL string
	// SandboxURL reaches every sandbox's envd, named by headers; the API URL by default,
	// since cove server serves both on one port.
	SandboxURL string
	// APIKey authenticates REST calls (X-API-Key).
	APIKey string
	// AdminToken authenticates the operator's calls (X-Admin-Token: AdminStatus): the
	// server data dir's admin-token file. COVE_ADMIN_TOKEN when empty.
	AdminToken string
	// Logger receives the SDK's lines: one "stream cancelled" line per process stream that
	// ends before its end event, warnings, and a DEBUG line per HTTP request. nil uses
	// slog.Default().
	Logger *slog.Logger
	// HTTPClient makes every request; nil uses a client with no overall timeout (streams
	// are long; give yours none either). Its Transport is wrapped, not replaced.
	HTTPClient *http.Client
	// RequestTimeout bounds each call that is not a stream (REST calls, file transfers,
	// unary RPCs): 60 s when 0, none when negative. It ends the call with ErrTimeout.
	RequestTimeout time.Duration
	// RestartWait is how long a request is tried again while the server refuses connections,
	// as it does while it restarts (its sandboxes live on): 30 s when 0, not at all when
	// negative. A request with a body that cannot be sent twice is not retried. Past it the
	// call fails with ErrUnavailable. It also ends with the call's own timeout.
	RestartWait time.Duration
}

// DefaultRestartWait is Config.RestartWait's default.
const DefaultRestartWait = 30 * time.Second

// DefaultAPIURL is where a local `cove server` listens by default.
const DefaultAPIURL = "http://127.0.0.1:3000"

// DefaultRequestTimeout is Config.RequestTimeout's default.
const DefaultRequestTimeout = 60 * time.Second

// EnvdPort is envd's port inside every sandbox.
const EnvdPort = envdapi.Port

// resolve fills c's empty fields from the environment and the defaults.
func (c Config) resolve() Config {
	c.APIURL = strings.TrimRight(cmp.Or(c.APIURL, os.Getenv("COVE_API_URL"), os.Getenv("E2B_API_URL"), DefaultAPIURL), "/")
	c.SandboxURL = strings.TrimRight(cmp.Or(c.SandboxURL, os.Getenv("COVE_SANDBOX_URL"), os.Getenv("E2B_SANDBOX_URL"), c.APIURL), "/")
	c.APIKey = cmp.Or(c.APIKey, os.Getenv("COVE_API_KEY"), os.Getenv("E2B_API_KEY"))
	c.AdminToken = cmp.Or(c.AdminToken, os.Getenv("COVE_ADMIN_TOKEN"))
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RestartWait == 0 {
		c.RestartWait = DefaultRestartWait
	}
	return c
}
