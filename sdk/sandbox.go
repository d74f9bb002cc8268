package cove

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/sdk/reason"
)

// Sandbox is one running sandbox and the way into it: its commands, files and terminals.
// Get one from Client.Create or Client.Connect.
type Sandbox struct {
	ID          string
	TemplateID  string
	Alias       string
	EnvdVersion string
	// Secure sandboxes have an access token; the SDK sends it on every envd call.
	Secure bool
	// TrafficAccessToken opens the sandbox's private ports (NetworkRules.AllowPublicTraffic
	// false): send it in the E2b-Traffic-Access-Token header. "" when they are public.
	TrafficAccessToken string

	Commands *Commands
	Files    *Files
	PTY      *PTY

	client      *Client
	accessToken string
	requestID   string
}

// RequestID returns the request id of the call that returned the sandbox.
func (s *Sandbox) RequestID() string { return s.requestID }

// Client returns the client the sandbox was made with.
func (s *Sandbox) Client() *Client { return s.client }

// SandboxState is a sandbox's state in listings.
type SandboxState string

// The states a listing can filter on.
const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
)

// SandboxOptions are Create's parameters; the zero value makes a sandbox from the base
// template with the server's default timeout.
type SandboxOptions struct {
	// Template is the template id or alias; "base" when empty.
	Template string
	// Timeout is how long the sandbox lives before it is killed (or paused, with
	// AutoPause); the server's default when 0. SetTimeout changes it.
	Timeout time.Duration
	// Metadata is kept with the sandbox and can filter List.
	Metadata map[string]string
	// EnvVars are set for every command run in the sandbox.
	EnvVars map[string]string
	// Insecure makes a sandbox without an access token: its envd then answers anyone who
	// can reach it and knows its id. By default a sandbox is secure: it has an access token
	// that the SDK sends on every envd call, and signed URLs (DownloadURL, UploadURL) are
	// the way to hand out one file.
	Insecure bool
	// AutoPause pauses the sandbox instead of killing it when its timeout passes.
	AutoPause bool
	// AutoPauseWithoutMemory makes that auto-pause keep only the sandbox's files (E2B's
	// keepMemory: false): its resume reboots it, and traffic never resumes it, so it
	// cannot go with AutoResume.
	AutoPauseWithoutMemory bool
	// AutoResume resumes a paused sandbox when traffic reaches it.
	AutoResume bool
	// NoInternet cuts the sandbox off from the internet (as DenyOut 0.0.0.0/0 does:
	// Network.AllowOut still wins).
	NoInternet bool
	// VolumeMounts mounts the team's volumes (CreateVolume) into the sandbox, read-write
	// (in one live sandbox at a time) or read-only (in any number).
	VolumeMounts []VolumeMount
	// Network holds egress rules; nil leaves them empty.
	Network *NetworkRules
	// IAM registers workload identity tokens the network rules can use; nil registers none.
	IAM *IAM
}

// VolumeMount mounts a volume (by name) at an absolute path in a sandbox. The server reads
// this very type from create's volumeMounts.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// ReadOnly mounts it read-only: writes inside get EROFS. A volume is mounted read-write
	// by one live sandbox at a time (a second one is ErrConflict), read-only by any number.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// NewSandbox is E2B's NewSandbox, the body of POST /sandboxes and /v2/sandboxes: Create
// sends it and the server decodes this very type.
type NewSandbox struct {
	TemplateID string   `json:"templateID"`
	Timeout    *float64 `json:"timeout,omitempty"` // seconds; the server's default when absent
	// Metadata is kept with the sandbox and can filter listings.
	Metadata map[string]string `json:"metadata,omitempty"`
	// EnvVars are set for every command run in the sandbox.
	EnvVars   map[string]string `json:"envVars,omitempty"`
	AutoPause bool              `json:"autoPause"`
	// AutoPauseMemory false asks a filesystem-only auto-pause (lifecycle.onTimeout
	// {action: 'pause', keepMemory: false}): the resume reboots the sandbox on its kept
	// files; it cannot go with AutoResume.
	AutoPauseMemory *bool                    `json:"autoPauseMemory,omitempty"`
	AutoResume      *SandboxAutoResumeConfig `json:"autoResume,omitempty"`
	// Secure asks for an envd access token; absent, the v2 create secures and the v1 one
	// does not.
	Secure *bool `json:"secure,omitempty"`
	// AllowInternetAccess false cuts the sandbox off from the internet; absent is true.
	AllowInternetAccess *bool `json:"allow_internet_access,omitempty"`
	// Network is E2B's SandboxNetworkConfig (NetworkRules), kept as JSON: the server reads
	// it strictly, naming any field it does not know.
	Network json.RawMessage `json:"network,omitempty"`
	// CollectLogs switches the collection of command output into the log store (Cove's
	// extension; on when absent).
	CollectLogs *bool `json:"collectLogs,omitempty"`
	// VolumeMounts mounts the team's volumes (by name) at paths in the sandbox.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// IAM registers named workload identity tokens (E2B's iam).
	IAM *IAM `json:"iam,omitempty"`
}

// SandboxAutoResumeConfig is E2B's: a paused sandbox resumes when traffic reaches it.
type SandboxAutoResumeConfig struct {
	Enabled bool `json:"enabled"`
}

// CreatedSandbox is E2B's Sandbox, the answer to create, connect and resume: the server
// emits this very type.
type CreatedSandbox struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	Alias           string `json:"alias,omitempty"`
	ClientID        string `json:"clientID"` // E2B's deprecated field, always filled
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// Domain is the sandboxes' base domain ({port}-{id}.{domain}); null keeps the SDK's
	// configured sandbox URL.
	Domain *string `json:"domain"`
	// TrafficAccessToken opens the sandbox's private ports (allowPublicTraffic false).
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
}

func (c *Client) newSandbox(j CreatedSandbox, requestID string) *Sandbox {
	s := &Sandbox{
		ID: j.SandboxID, TemplateID: j.TemplateID, Alias: j.Alias, EnvdVersion: j.EnvdVersion,
		Secure: j.EnvdAccessToken != "", client: c, accessToken: j.EnvdAccessToken, requestID: requestID,
		TrafficAccessToken: j.TrafficAccessToken,
	}
	e := newEnvd(c, s)
	s.Commands = &Commands{e: e}
	s.Files = &Files{e: e}
	s.PTY = &PTY{e: e}
	return s
}

// Create makes a sandbox and returns it once its envd answers.
func (c *Client) Create(ctx context.Context, opts SandboxOptions) (*Sandbox, error) {
	secure, internet := !opts.Insecure, !opts.NoInternet
	body := NewSandbox{
		TemplateID: cmpOr(opts.Template, "base"), Metadata: opts.Metadata, EnvVars: opts.EnvVars,
		AutoPause: opts.AutoPause, Secure: &secure, AllowInternetAccess: &internet, VolumeMounts: opts.VolumeMounts,
	}
	body.IAM = opts.IAM
	if opts.Timeout > 0 {
		s := float64(seconds(opts.Timeout))
		body.Timeout = &s
	}
	if opts.AutoResume {
		body.AutoResume = &SandboxAutoResumeConfig{Enabled: true}
	}
	if opts.AutoPauseWithoutMemory {
		keep := false
		body.AutoPauseMemory = &keep
	}
	if opts.Network != nil {
		raw, err := json.Marshal(opts.Network)
		if err != nil {
			return nil, &Error{Op: "create sandbox", Message: "network: " + err.Error(), Err: err}
		}
		body.Network = raw
	}
	var out CreatedSandbox
	res, err := c.do(ctx, "create sandbox", "", http.MethodPost, "/sandboxes", body, &out)
	if err != nil {
		return nil, err
	}
	return c.newSandbox(out, res.requestID), nil
}

// Connect returns a running sandbox by id, resuming it if it is paused. A timeout > 0
// extends its life to at least that long from now (never shortens it).
func (c *Client) Connect(ctx context.Context, sandboxID string, timeout time.Duration) (*Sandbox, error) {
	body := map[string]any{}
	if timeout > 0 {
		body["timeout"] = seconds(timeout)
	}
	var out CreatedSandbox
	res, err := c.do(ctx, "connect to sandbox", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/connect", body, &out)
	if err != nil {
		return nil, err
	}
	if out.SandboxID == "" {
		out.SandboxID = sandboxID
	}
	return c.newSandbox(out, res.requestID), nil
}

// Resume resumes a paused sandbox (ErrConflict when it runs); Connect does the same
// without failing on a running one.
func (c *Client) Resume(ctx context.Context, sandboxID string, timeout time.Duration) (*Sandbox, error) {
	body := map[string]any{}
	if timeout > 0 {
		body["timeout"] = seconds(timeout)
	}
	var out CreatedSandbox
	res, err := c.do(ctx, "resume sandbox", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/resume", body, &out)
	if err != nil {
		return nil, err
	}
	if out.SandboxID == "" {
		out.SandboxID = sandboxID
	}
	return c.newSandbox(out, res.requestID), nil
}

// SandboxInfo describes a sandbox, as Info and List return it: E2B's SandboxDetail and
// ListedSandbox, which the server emits as this very type.
type SandboxInfo struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"` // E2B's deprecated field, always filled
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	State       SandboxState      `json:"state"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	// EnvdAccessToken is sent by Info of a secure sandbox, never by a listing.
	EnvdAccessToken string  `json:"envdAccessToken,omitempty"`
	Domain          *string `json:"domain"`
	// AllowInternetAccess says whether the sandbox has a way out to the internet: false
	// when it asked for none or the server gives sandboxes no network.
	AllowInternetAccess bool `json:"allowInternetAccess"`
	// Network holds the sandbox's egress rules (Info only; nil when it has none).
	Network *NetworkRules `json:"network,omitempty"`
	// VolumeMounts are the volumes the sandbox mounts (Info only).
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
	// Runtime is the engine the sandbox runs on: runc, or gVisor's runsc (Cove's extension).
	Runtime string `json:"runtime,omitempty"`

	requestID string
}

// RequestID returns the request id of the call that returned the info (for List, of
// the page it came in).
func (i *SandboxInfo) RequestID() string { return i.requestID }

// Info describes a sandbox. A killed sandbox's error is a *SandboxKilledError.
func (c *Client) Info(ctx context.Context, sandboxID string) (*SandboxInfo, error) {
	var out SandboxInfo
	res, err := c.do(ctx, "get sandbox", sandboxID, http.MethodGet, "/sandboxes/"+url.PathEscape(sandboxID), nil, &out)
	if err != nil {
		return nil, err
	}
	out.requestID = res.requestID
	return &out, nil
}

// ListOptions filter List.
type ListOptions struct {
	// Metadata keeps sandboxes whose metadata has every one of these pairs.
	Metadata map[string]string
	// States keeps sandboxes in these states; running and paused when empty.
	States []SandboxState
	// PageSize is how many sandboxes one request fetches (1..100); the server's default
	// when 0.
	PageSize int
	// Order is by start time; newest first when "".
	Order ListOrder
	// StartedAfter keeps sandboxes started at or after it, when not zero.
	StartedAfter time.Time
	// Template keeps sandboxes of this template, by id or alias, when not "".
	Template string
}

// ListOrder is a listing's direction by start time: the vocabulary the server parses.
type ListOrder = reason.ListOrder

// The list orders.
const (
	NewestFirst = reason.OrderDesc
	OldestFirst = reason.OrderAsc
)

// ParseListOrder reads "asc" or "desc" ("" is newest first); anything else is an error.
func ParseListOrder(s string) (ListOrder, error) { return reason.ParseListOrder(s) }

// List iterates over the team's sandboxes, fetching pages as the loop needs them. An
// error ends the iteration: it is yielded with a nil info.
func (c *Client) List(ctx context.Context, opts ListOptions) iter.Seq2[*SandboxInfo, error] {
	return func(yield func(*SandboxInfo, error) bool) {
		q := url.Values{}
		if len(opts.Metadata) > 0 {
			md := url.Values{}
			for k, v := range opts.Metadata {
				md.Set(k, v)
			}
			q.Set("metadata", md.Encode())
		}
		if len(opts.States) > 0 {
			states := make([]string, len(opts.States))
			for i, s := range opts.States {
				states[i] = string(s)
			}
			q.Set("state", strings.Join(states, ","))
		}
		if opts.PageSize > 0 {
			q.Set("limit", strconv.Itoa(opts.PageSize))
		}
		if opts.Order != "" {
			q.Set("order", string(opts.Order))
		}
		if !opts.StartedAfter.IsZero() {
			q.Set("startedAfter", opts.StartedAfter.UTC().Format(time.RFC3339Nano))
		}
		if opts.Template != "" {
			q.Set("template", opts.Template)
		}
		for {
			var page []*SandboxInfo
			res, err := c.do(ctx, "list sandboxes", "", http.MethodGet, "/v2/sandboxes?"+q.Encode(), nil, &page)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, info := range page {
				info.requestID = res.requestID
				if !yield(info, nil) {
					return
				}
			}
			next := res.header.Get("X-Next-Token")
			if next == "" || next == q.Get("nextToken") || len(page) == 0 {
				return
			}
			q.Set("nextToken", next)
		}
	}
}

// Health reports whether the Cove server answers (GET /health); nil means it is up.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, "health check", "", http.MethodGet, "/health", nil, nil)
	return err
}

// Kill kills a sandbox. An unknown sandbox is ErrNotFound; one already killed is a
// *SandboxKilledError (which matches ErrNotFound too).
func (c *Client) Kill(ctx context.Context, sandboxID string) error {
	_, err := c.do(ctx, "kill sandbox", sandboxID, http.MethodDelete, "/sandboxes/"+url.PathEscape(sandboxID), nil, nil)
	return err
}

// SetTimeout makes the sandbox live until timeout from now, shorter or longer.
func (c *Client) SetTimeout(ctx context.Context, sandboxID string, timeout time.Duration) error {
	_, err := c.do(ctx, "set sandbox timeout", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/timeout",
		map[string]any{"timeout": seconds(timeout)}, nil)
	return err
}

// Refresh extends a sandbox's life to at least duration from now (E2B's refreshes: it
// never shortens it); the server's default duration when 0.
func (c *Client) Refresh(ctx context.Context, sandboxID string, duration time.Duration) error {
	body := map[string]any{}
	if duration > 0 {
		body["duration"] = seconds(duration)
	}
	_, err := c.do(ctx, "refresh sandbox", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/refreshes", body, nil)
	return err
}

// Pause pauses a running sandbox the server's default way (ErrConflict when it is paused
// already).
func (c *Client) Pause(ctx context.Context, sandboxID string) error {
	return c.PauseWith(ctx, sandboxID, PauseOptions{})
}

// PauseOptions choose how a sandbox is paused.
type PauseOptions struct {
	// Kind is reason.PauseSnapshot (processes and memory to disk, RAM freed, survives a
	// server restart), reason.PauseFreeze (in place, in RAM, fastest) or
	// reason.PauseFilesystem (E2B's keepMemory: false: only the files are kept, the resume
	// reboots the sandbox and runs its template's start command again, traffic never
	// resumes it); the server's default (snapshot where it can) when "".
	Kind reason.PauseKind
}

// PauseWith pauses a running sandbox as opts say. A snapshot that fails leaves the sandbox
// running and returns the reason.
func (c *Client) PauseWith(ctx context.Context, sandboxID string, opts PauseOptions) error {
	body := map[string]any{}
	switch opts.Kind {
	case "":
	case reason.PauseFilesystem:
		body["memory"] = false // as E2B's SDKs ask it
	default:
		body["kind"] = opts.Kind.String()
	}
	_, err := c.do(ctx, "pause sandbox", sandboxID, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/pause", body, nil)
	return err
}

// Metric is one sample of a sandbox's resource use: E2B's SandboxMetric, with Cove's network
// counters (since the sandbox started). The server emits this very type.
type Metric struct {
	Timestamp     time.Time `json:"timestamp"` // to the second; E2B deprecates it for TimestampUnix
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
	NetRxBytes    int64     `json:"netRxBytes"`
	NetTxBytes    int64     `json:"netTxBytes"`
	NetRxPackets  int64     `json:"netRxPackets"`
	NetTxPackets  int64     `json:"netTxPackets"`
}

// SandboxesWithMetrics is E2B's answer to GET /sandboxes/metrics: each sandbox's newest
// sample, by sandbox id.
type SandboxesWithMetrics struct {
	Sandboxes map[string]Metric `json:"sandboxes"`
}

// Metrics returns a sandbox's resource samples between start and end (zero times leave
// that end open).
func (c *Client) Metrics(ctx context.Context, sandboxID string, start, end time.Time) ([]Metric, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", strconv.FormatInt(start.Unix(), 10))
	}
	if !end.IsZero() {
		q.Set("end", strconv.FormatInt(end.Unix(), 10))
	}
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/metrics"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out []Metric
	if _, err := c.do(ctx, "get sandbox metrics", sandboxID, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// LatestMetrics returns the newest resource sample of each of the team's sandboxes among
// ids (1 to 100), keyed by sandbox id; ids without samples or of another team are left out.
func (c *Client) LatestMetrics(ctx context.Context, ids ...string) (map[string]Metric, error) {
	if len(ids) == 0 {
		return nil, &Error{Op: "get latest sandbox metrics", Message: "no sandbox ids given"}
	}
	path := "/sandboxes/metrics?" + url.Values{"sandbox_ids": {strings.Join(ids, ",")}}.Encode()
	var out SandboxesWithMetrics
	if _, err := c.do(ctx, "get latest sandbox metrics", "", http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// Info describes the sandbox.
func (s *Sandbox) Info(ctx context.Context) (*SandboxInfo, error) { return s.client.Info(ctx, s.ID) }

// Kill kills the sandbox.
func (s *Sandbox) Kill(ctx context.Context) error { return s.client.Kill(ctx, s.ID) }

// SetTimeout makes the sandbox live until timeout from now.
func (s *Sandbox) SetTimeout(ctx context.Context, timeout time.Duration) error {
	return s.client.SetTimeout(ctx, s.ID, timeout)
}

// Refresh extends the sandbox's life to at least duration from now.
func (s *Sandbox) Refresh(ctx context.Context, duration time.Duration) error {
	return s.client.Refresh(ctx, s.ID, duration)
}

// Pause pauses the sandbox.
func (s *Sandbox) Pause(ctx context.Context) error { return s.client.Pause(ctx, s.ID) }

// Resume resumes the paused sandbox, keeping this value usable.
func (s *Sandbox) Resume(ctx context.Context, timeout time.Duration) error {
	r, err := s.client.Resume(ctx, s.ID, timeout)
	if err != nil {
		return err
	}
	s.requestID = r.requestID
	return nil
}

// Metrics returns the sandbox's resource samples between start and end.
func (s *Sandbox) Metrics(ctx context.Context, start, end time.Time) ([]Metric, error) {
	return s.client.Metrics(ctx, s.ID, start, end)
}

// IsRunning asks the sandbox's envd for its health through the proxy: false when the
// sandbox is paused or gone.
func (s *Sandbox) IsRunning(ctx context.Context) (bool, error) {
	resp, ci, err := s.Files.e.httpDo(ctx, "health", http.MethodGet, "/health", nil, nil)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return true, nil
	case resp.StatusCode == http.StatusBadGateway:
		return false, nil
	}
	return false, &Error{Op: "health", SandboxID: s.ID, StatusCode: resp.StatusCode, RequestID: ci.requestID}
}

func (s *Sandbox) String() string { return fmt.Sprintf("sandbox %s", s.ID) }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
