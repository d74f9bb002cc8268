package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// createBody is E2B's NewSandbox (POST /sandboxes and /v2/sandboxes): the SDK's type, which
// its Create sends.
type createBody = cove.NewSandbox

// Metadata limits. Metadata is stored with the sandbox, listed, filtered on and sent with
// every event and webhook, so it is kept to what labels need: E2B-like small labels.
const (
	MaxMetadataKeys       = 64
	MaxMetadataKeyBytes   = 128
	MaxMetadataValueBytes = 1024
	MaxMetadataBytes      = 8 << 10 // keys and values together
)

// validMetadata refuses metadata over the limits, naming the limit.
func validMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return fmt.Errorf("%w: metadata has %d keys, over the limit of %d keys", errBadRequest, len(md), MaxMetadataKeys)
	}
	total := 0
	for k, v := range md {
		switch {
		case k == "":
			return fmt.Errorf("%w: metadata: a key is empty", errBadRequest)
		case len(k) > MaxMetadataKeyBytes:
			return fmt.Errorf("%w: metadata: key %.32q… is %d bytes, over the limit of %d bytes per key", errBadRequest, k, len(k), MaxMetadataKeyBytes)
		case len(v) > MaxMetadataValueBytes:
			return fmt.Errorf("%w: metadata: the value of %q is %d bytes, over the limit of %d bytes per value", errBadRequest, k, len(v), MaxMetadataValueBytes)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata is %d bytes, over the limit of %d bytes of keys and values in all", errBadRequest, total, MaxMetadataBytes)
	}
	return nil
}

// autoPauseKind is how a sandbox's TTL auto-pause pauses: E2B's autoPauseMemory false keeps
// only its files; absent or true, the server's default.
func autoPauseKind(memory *bool) reason.PauseKind {
	if memory != nil && !*memory {
		return reason.PauseFilesystem
	}
	return ""
}

// validCreate refuses at create what would break the sandbox later: a template id with
// '..' or NUL in it, env names or values no process environment can hold, and metadata
// over its limits.
func validCreate(body createBody) error {
	if id := body.TemplateID; strings.Contains(id, "..") || strings.ContainsRune(id, 0) {
		return fmt.Errorf("%w: templateID %q must not contain '..' or NUL", errBadRequest, id)
	}
	if err := validMetadata(body.Metadata); err != nil {
		return err
	}
	if body.AutoPauseMemory != nil && !*body.AutoPauseMemory && body.AutoResume != nil && body.AutoResume.Enabled {
		return fmt.Errorf("%w: autoPauseMemory: a filesystem-only auto-pause (keepMemory: false) cannot be combined with autoResume: traffic never resumes a sandbox paused without its memory", errBadRequest)
	}
	for k, v := range body.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: envVars: name %q must be non-empty, without '=' or NUL", errBadRequest, k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: envVars: the value of %q contains NUL", errBadRequest, k)
		}
	}
	return nil
}

func (a *api) create(w http.ResponseWriter, r *http.Request, c caller) error {
	var raw json.RawMessage
	if err := decode(r, &raw); err != nil {
		return err
	}
	var body createBody
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			return fmt.Errorf("%w: request body: %v", errBadRequest, err)
		}
		if err := checkCreateFields(raw); err != nil {
			return err
		}
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	if err := validCreate(body); err != nil {
		return err
	}
	netw, err := parseCreateNetwork(body.Network)
	if err != nil {
		return err
	}
	iam, err := a.parseIAM(body.IAM)
	if err != nil {
		return err
	}
	// E2B's v2 create has no secure field: every sandbox it makes is secured (an envd access
	// token, signed file URLs). The v1 create secures only when asked. An explicit value wins.
	secure := r.URL.Path == "/v2/sandboxes"
	if body.Secure != nil {
		secure = *body.Secure
	}
	req := orchestrator.CreateRequest{
		TeamID:     c.team.ID,
		TemplateID: body.TemplateID,
		APIKeyID:   c.key.ID,
		Timeout:    timeout,
		Metadata:   body.Metadata,
		EnvVars:    body.EnvVars,
		Secure:     secure,
		AutoPause:  body.AutoPause,
		AutoResume: body.AutoResume != nil && body.AutoResume.Enabled,
		// E2B allows internet access unless the client says false.
		AllowInternet:   body.AllowInternetAccess == nil || *body.AllowInternetAccess,
		Network:         netw.policy,
		PrivateTraffic:  netw.private,
		MaskRequestHost: netw.maskHost,
		AutoPauseKind:   autoPauseKind(body.AutoPauseMemory),
		HTTPSPorts:      netw.httpsPorts,
		CollectLogs:     body.CollectLogs,
		// The caller's key is masked wherever the sandbox's output might echo it.
		Secrets: []string{apiKeyFrom(r)},
	}
	for _, m := range body.VolumeMounts {
		req.VolumeMounts = append(req.VolumeMounts, orchestrator.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	if netw.policy != nil {
		req.Secrets = append(req.Secrets, netw.policy.Secrets()...)
	}
	ctx := r.Context()
	if body.TemplateID != "" {
		ctx = telemetry.With(ctx, telemetry.KeyTemplateID, body.TemplateID)
	}
	sb, err := a.cfg.Sandboxes.Create(ctx, req)
	if err != nil {
		if body.TemplateID != "" {
			return fmt.Errorf("create sandbox from template %q: %w", body.TemplateID, err)
		}
		return fmt.Errorf("create sandbox: %w", err)
	}
	if err := a.registerIAM(ctx, c, sb, iam); err != nil {
		return err
	}
	httpx.NoteFrom(ctx).Add(telemetry.KeySandboxID, sb.ID)
	writeJSON(w, http.StatusCreated, a.newSandbox(sb))
	return nil
}

func (a *api) get(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	sb, err := a.cfg.Sandboxes.Get(r.Context(), c.team.ID, id)
	if err != nil {
		return fmt.Errorf("get sandbox %s: %w", id, err)
	}
	d := a.detail(sb, true)
	d.Network = a.networkOf(r.Context(), c.team.ID, id)
	if d.VolumeMounts, err = a.volumeMountsOf(r.Context(), c.team.ID, id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// list serves GET /v2/sandboxes: one page, filtered by state and metadata.
func (a *api) list(w http.ResponseWriter, r *http.Request, c caller) error {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		return err
	}
	f.TeamID = c.team.ID
	page, err := a.cfg.Sandboxes.List(r.Context(), f)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	if page.Next != "" {
		w.Header().Set("X-Next-Token", page.Next)
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(page.Total))
	out, err := a.details(r.Context(), page.Sandboxes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// maxLegacyList bounds the legacy listing, which has no pagination.
const maxLegacyList = 10000

// listLegacy serves GET /sandboxes: every running sandbox, filtered by metadata.
func (a *api) listLegacy(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	md, err := parseMetadata(q.Get("metadata"))
	if err != nil {
		return err
	}
	f := store.SandboxFilter{
		TeamID:   c.team.ID,
		States:   []store.SandboxState{store.StateRunning},
		Metadata: md,
		Limit:    100,
	}
	var all []*store.Sandbox
	total := 0
	for {
		page, err := a.cfg.Sandboxes.List(r.Context(), f)
		if err != nil {
			return fmt.Errorf("list sandboxes: %w", err)
		}
		all = append(all, page.Sandboxes...)
		total = page.Total
		if page.Next == "" || page.Next == f.Next || len(all) >= maxLegacyList {
			break
		}
		f.Next = page.Next
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(total))
	out, err := a.details(r.Context(), all)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) kill(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	ctx := telemetry.With(r.Context(), telemetry.KeyKillReason, reason.KillRequest.String())
	telemetry.Logger(ctx).Info("sandbox kill requested")
	if err := a.cfg.Sandboxes.Kill(ctx, c.team.ID, id, reason.KillRequest, c.key.ID); err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	a.forgetIAM(ctx, id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) setTimeout(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var body cove.SetTimeoutRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Timeout == nil {
		return fmt.Errorf("%w: timeout (seconds) is required", errBadRequest)
	}
	d, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	if err := a.cfg.Sandboxes.SetTimeout(r.Context(), c.team.ID, id, d); err != nil {
		return fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) refresh(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var body cove.RefreshRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	d, err := seconds("duration", body.Duration)
	if err != nil {
		return err
	}
	if err := a.cfg.Sandboxes.Refresh(r.Context(), c.team.ID, id, d); err != nil {
		return fmt.Errorf("refresh sandbox %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) pause(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var body cove.PauseRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	var kind reason.PauseKind
	if body.Kind != "" {
		k, err := reason.ParsePauseKind(body.Kind)
		if err != nil {
			return fmt.Errorf("%w: kind: %v (want snapshot, freeze or filesystem)", errBadRequest, err)
		}
		kind = k
	}
	if body.Memory != nil {
		// E2B's keepMemory: false keeps only the files; true keeps memory, either Cove way.
		switch keep := *body.Memory; {
		case !keep && kind == "":
			kind = reason.PauseFilesystem
		case keep != kind.KeepsMemory() && kind != "":
			return fmt.Errorf("%w: memory: %t contradicts kind %s", errBadRequest, keep, kind)
		}
	}
	if err := a.cfg.Sandboxes.PauseWith(r.Context(), c.team.ID, id, orchestrator.PauseOptions{Kind: kind}); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) resume(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var body cove.ConnectSandbox
	if err := decode(r, &body); err != nil {
		return err
	}
	d, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	sb, err := a.cfg.Sandboxes.Resume(r.Context(), c.team.ID, id, d)
	if err != nil {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	writeJSON(w, http.StatusCreated, a.newSandbox(sb))
	return nil
}

func (a *api) connect(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var body cove.ConnectSandbox
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Memory != nil && !*body.Memory {
		// Cove restores memory; a cold boot asked of a sandbox that kept it is refused
		// rather than silently ignored.
		// A sandbox paused keeping only its files reboots anyway; any other would not.
		sb, err := a.cfg.Sandboxes.Get(r.Context(), c.team.ID, id)
		if err != nil {
			return fmt.Errorf("connect to sandbox %s: %w", id, err)
		}
		if sb.State != store.StatePaused || sb.PauseKind.KeepsMemory() {
			return fmt.Errorf("%w: memory: a resume that reboots from disk (onResume: 'reboot') is supported by this Cove server only for a sandbox paused with keepMemory: false; connect without it to restore the sandbox with its memory", errBadRequest)
		}
	}
	d, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	sb, resumed, err := a.cfg.Sandboxes.Connect(r.Context(), c.team.ID, id, d)
	if err != nil {
		return fmt.Errorf("connect to sandbox %s: %w", id, err)
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, a.newSandbox(sb))
	return nil
}

// parseFilter reads GET /v2/sandboxes's query: metadata (url-encoded k=v&k2=v2), state
// (comma-separated or repeated), limit (1..100) and nextToken.
func parseFilter(q url.Values) (store.SandboxFilter, error) {
	var f store.SandboxFilter
	md, err := parseMetadata(q.Get("metadata"))
	if err != nil {
		return f, err
	}
	f.Metadata = md
	for _, v := range q["state"] {
		for s := range strings.SplitSeq(v, ",") {
			switch st := store.SandboxState(strings.TrimSpace(s)); st {
			case "":
			case store.StateRunning, store.StatePaused:
				f.States = append(f.States, st)
			default:
				return f, fmt.Errorf("%w: state %q is not running or paused", errBadRequest, s)
			}
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return f, fmt.Errorf("%w: limit %q is not a number from 1 to 100", errBadRequest, s)
		}
		f.Limit = n
	}
	f.Next = q.Get("nextToken")
	order, err := store.ParseListOrder(q.Get("order"))
	if err != nil {
		return f, fmt.Errorf("%w: order %q is not asc or desc", errBadRequest, q.Get("order"))
	}
	f.Order = order
	if s := q.Get("startedAfter"); s != "" {
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return f, fmt.Errorf("%w: startedAfter %q is not an RFC 3339 timestamp", errBadRequest, s)
		}
		f.StartedAfter = at
	}
	f.Template = q.Get("template")
	return f, nil
}

// parseMetadata reads the metadata filter, itself a query string: the SDKs url-encode each
// key and value, join them as k=v&k2=v2 (encoding them a second time), and url-encode the
// whole as one parameter.
func parseMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata filter %q is not url-encoded key=value pairs: %v", errBadRequest, s, err)
	}
	md := make(map[string]string, len(vals))
	for k, v := range vals {
		// The SDKs encode each key and value once more before joining them (E2B's server
		// decodes them again too); a decode that fails keeps the text as sent.
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		val := v[len(v)-1]
		if dv, err := url.QueryUnescape(val); err == nil {
			val = dv
		}
		if k == "" {
			return nil, fmt.Errorf("%w: metadata filter %q has an empty key", errBadRequest, s)
		}
		md[k] = val
	}
	return md, nil
}

// decode reads a JSON request body into v. An empty body leaves v as it is; bodies may be
// chunked without a Content-Length.
func decode(r *http.Request, v any) error {
	if r.Body == nil {
		return nil
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody+1))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("%w: request body is not valid JSON (at most %d bytes): %v", errBadRequest, maxBody, err)
	}
	return nil
}

// seconds converts an optional count of seconds to a duration; nil is 0 (the default).
func seconds(field string, s *float64) (time.Duration, error) {
	if s == nil {
		return 0, nil
	}
	if *s < 0 || math.IsNaN(*s) || *s > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("%w: %s %v is not a number of seconds >= 0", errBadRequest, field, *s)
	}
	return time.Duration(*s * float64(time.Second)), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpx.WriteJSON(w, status, v) }
