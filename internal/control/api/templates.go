package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// maxUpload bounds one uploaded COPY archive.
const maxUpload = 4 << 30

// uploadTokens are the one-time upload links GET /templates/{id}/files/{hash} hands out:
// the SDK PUTs the archive to the link without its API key.
type uploadTokens struct {
	mu     sync.Mutex
	tokens map[string]uploadToken
}

type uploadToken struct {
	team, hash string
	expires    time.Time
}

func (u *uploadTokens) issue(team, hash string) string {
	b := make([]byte, 16)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tokens == nil {
		u.tokens = map[string]uploadToken{}
	}
	now := time.Now()
	for k, t := range u.tokens {
		if now.After(t.expires) {
			delete(u.tokens, k)
		}
	}
	u.tokens[tok] = uploadToken{team: team, hash: hash, expires: now.Add(time.Hour)}
	return tok
}

// take spends the token tok for hash and returns the team it was issued to.
func (u *uploadTokens) take(tok, hash string) (team string, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.tokens[tok]
	if !ok || t.hash != hash || time.Now().After(t.expires) {
		return "", false
	}
	delete(u.tokens, tok)
	return t.team, true
}

func (a *api) templateRoutes() {
	if a.cfg.Builds == nil {
		return // the template operations stay 501
	}
	a.handle("POST /v3/templates", a.requestBuild)
	a.handle("GET /templates/{templateID}/files/{hash}", a.uploadLink)
	a.public("PUT /templates/{templateID}/files/{hash}/upload", a.upload) // the link's token authenticates
	a.handle("POST /v2/templates/{templateID}/builds/{buildID}", a.startBuild)
	a.handle("GET /templates/{templateID}/builds/{buildID}/status", a.buildStatus)
	a.handle("GET /templates/{templateID}/builds/{buildID}/logs", a.buildLogs)
	a.handle("GET /templates", a.listTemplates)
	a.handle("GET /v2/templates", a.listTemplates)
	a.handle("GET /templates/{templateID}", a.getTemplate)
	a.handle("PATCH /templates/{templateID}", a.updateTemplate)
	a.handle("PATCH /v2/templates/{templateID}", a.updateTemplate)
	a.handle("DELETE /templates/{templateID}", a.deleteTemplate)
	// GET /templates/aliases/{alias} and GET /templates/{templateID}/tags overlap (a template
	// called "aliases", an alias called "tags"): one route tells them apart.
	a.handle("GET /templates/{templateID}/{sub}", func(w http.ResponseWriter, r *http.Request, c caller) error {
		if r.PathValue("templateID") == "aliases" {
			return a.templateAlias(w, r, c)
		}
		if r.PathValue("sub") == "tags" {
			return a.templateTags(w, r, c)
		}
		return errUnrouted(r)
	})
	a.handle("POST /templates/tags", a.assignTags)
	a.handle("DELETE /templates/tags", a.removeTags)
}

func (a *api) templateTags(w http.ResponseWriter, r *http.Request, c caller) error {
	name := templateNameOnly(r.PathValue("templateID"))
	if _, err := a.visible(name, c); err != nil {
		return err
	}
	tags, err := a.cfg.Builds.Store().Tags(name)
	if err != nil {
		return err
	}
	out := make([]cove.TemplateTag, len(tags))
	for i, t := range tags {
		out[i] = cove.TemplateTag{Tag: t.Tag, BuildID: t.BuildID, CreatedAt: t.CreatedAt}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) assignTags(w http.ResponseWriter, r *http.Request, c caller) error {
	var req cove.AssignTemplateTagsRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Target == "" || len(req.Tags) == 0 {
		return fmt.Errorf("%w: target (\"name:tag\") and tags are required", errBadRequest)
	}
	if err := a.cfg.Builds.Store().CheckOwner(templateNameOnly(req.Target), c.team.ID); err != nil {
		return err
	}
	var buildID string
	for _, tag := range req.Tags {
		t, err := a.cfg.Builds.Store().SetTag(req.Target, tag)
		if err != nil {
			return fmt.Errorf("tag %s: %w", tag, err)
		}
		buildID = t.BuildID
	}
	writeJSON(w, http.StatusCreated, cove.AssignedTemplateTags{BuildID: buildID, Tags: req.Tags})
	return nil
}

func (a *api) removeTags(w http.ResponseWriter, r *http.Request, c caller) error {
	var req cove.DeleteTemplateTagsRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	name, _ := templateName(req.Name)
	if name == "" || len(req.Tags) == 0 {
		return fmt.Errorf("%w: name and tags are required", errBadRequest)
	}
	if err := a.cfg.Builds.Store().CheckOwner(name, c.team.ID); err != nil {
		return err
	}
	for _, tag := range req.Tags {
		if err := a.cfg.Builds.Store().RemoveTag(name, tag); err != nil {
			return fmt.Errorf("tag %s: %w", tag, err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// templateName splits E2B's "name:tag" into the name and the tag ("" without one).
func templateName(s string) (name, tag string) {
	name, tag, _ = strings.Cut(s, ":")
	return name, tag
}

func templateNameOnly(s string) string {
	name, _ := templateName(s)
	return name
}

func (a *api) requestBuild(w http.ResponseWriter, r *http.Request, c caller) error {
	var req cove.TemplateBuildRequestV3
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Name == "" {
		req.Name = req.Alias
	}
	name, tag := templateName(req.Name)
	if name == "" {
		return fmt.Errorf("%w: name is required", errBadRequest)
	}
	tags := req.Tags
	if tag != "" {
		tags = append([]string{tag}, tags...)
	}
	rec, err := a.cfg.Builds.Request(build.NewBuild{Name: name, Tags: tags, CPUCount: req.CPUCount, MemoryMB: req.MemoryMB,
		Runtime: req.Runtime, RequestID: telemetry.RequestID(r.Context()), TeamID: c.team.ID})
	if err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusAccepted, cove.TemplateRequestResponseV3{TemplateID: name, BuildID: rec.ID,
		Names: []string{name}, Aliases: []string{name}, Tags: tags})
	return nil
}

func (a *api) uploadLink(w http.ResponseWriter, r *http.Request, c caller) error {
	hash := r.PathValue("hash")
	if a.cfg.Builds.HasUpload(c.team.ID, hash) {
		// 201 as E2B answers either way: its Python SDK fails on any other status.
		writeJSON(w, http.StatusCreated, cove.TemplateBuildFileUpload{Present: true})
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := fmt.Sprintf("%s://%s/templates/%s/files/%s/upload?token=%s", scheme, r.Host, r.PathValue("templateID"), hash, a.uploads.issue(c.team.ID, hash))
	writeJSON(w, http.StatusCreated, cove.TemplateBuildFileUpload{Present: false, URL: u})
	return nil
}

func (a *api) upload(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	team, ok := a.uploads.take(r.URL.Query().Get("token"), hash)
	if !ok {
		a.fail(w, r, fmt.Errorf("%w: the upload link is unknown, used or expired; ask for a new one", errUnauthorized))
		return
	}
	digest, err := contentDigest(r.Header.Get("Content-Digest"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.cfg.Builds.Upload(team, hash, r.Body, maxUpload, digest); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *api) startBuild(w http.ResponseWriter, r *http.Request, c caller) error {
	var req build.BuildRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if _, err := a.build(r, c); err != nil {
		return err
	}
	name, _ := templateName(r.PathValue("templateID"))
	if err := a.cfg.Builds.Start(r.Context(), r.PathValue("buildID"), name, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// logsJSON is the builder's log lines as the contract's entries.
func logsJSON(entries []build.LogEntry) []cove.BuildLogEntry {
	out := make([]cove.BuildLogEntry, len(entries))
	for i, e := range entries {
		out[i] = cove.BuildLogEntry{Timestamp: e.Time, Level: e.Level, Message: e.Message, Step: e.Step}
	}
	return out
}

// build returns the build of the path, 404 when it is not a build of the path's template
// by the caller's team.
func (a *api) build(r *http.Request, c caller) (*build.BuildRecord, error) {
	rec, err := a.cfg.Builds.Get(r.PathValue("buildID"))
	if err != nil {
		return nil, err
	}
	if name, _ := templateName(r.PathValue("templateID")); rec.Template != name || rec.TeamID != c.team.ID {
		return nil, fmt.Errorf("build %s of template %s: %w", rec.ID, name, template.ErrNotFound)
	}
	return rec, nil
}

func (a *api) buildStatus(w http.ResponseWriter, r *http.Request, c caller) error {
	rec, err := a.build(r, c)
	if err != nil {
		return err
	}
	offset := 0
	if s := r.URL.Query().Get("logsOffset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			return fmt.Errorf("%w: logsOffset %q is not a number >= 0", errBadRequest, s)
		}
	}
	out := cove.TemplateBuildStatus{BuildID: rec.ID, TemplateID: rec.Template, Status: rec.Status.String(),
		LogEntries: logsJSON(a.cfg.Builds.Logs(rec, offset)), Logs: []string{}}
	if rec.Reason != nil {
		out.Reason = &cove.BuildStatusReason{Message: rec.Reason.Message, Step: rec.Reason.Step, LogEntries: logsJSON(rec.Reason.Lines)}
	}
	out.StartSnapshot = startSnapshotJSON(rec.StartSnapshot)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) buildLogs(w http.ResponseWriter, r *http.Request, c caller) error {
	rec, err := a.build(r, c)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 0 || limit > 1000 {
			return fmt.Errorf("%w: limit %q is not a number from 0 to 1000", errBadRequest, s)
		}
	}
	var cursor time.Time
	if s := q.Get("cursor"); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: cursor %q is not a time in milliseconds", errBadRequest, s)
		}
		cursor = time.UnixMilli(ms)
	}
	backward := false
	switch d := q.Get("direction"); d {
	case "", "forward":
	case "backward":
		backward = true
	default:
		return fmt.Errorf("%w: direction %q is not forward or backward", errBadRequest, d)
	}
	level := q.Get("level")
	var out []build.LogEntry
	all := a.cfg.Builds.Logs(rec, 0)
	if backward {
		for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
			all[i], all[j] = all[j], all[i]
		}
	}
	for _, e := range all {
		if len(out) >= limit {
			break
		}
		if !cursor.IsZero() && ((!backward && e.Time.Before(cursor)) || (backward && e.Time.After(cursor))) {
			continue
		}
		if level != "" && level != "info" && e.Level != level {
			continue
		}
		out = append(out, e)
	}
	writeJSON(w, http.StatusOK, cove.BuildLogs{Logs: logsJSON(out)})
	return nil
}

type templateBuildJSON struct {
	BuildID     string `json:"buildID"`
	Status      string `json:"status"`
	CPUCount    int    `json:"cpuCount"`
	MemoryMB    int    `json:"memoryMB"`
	CreatedAt   string `json:"createdAt"`
	UpdatedAt   string `json:"updatedAt"`
	FinishedAt  string `json:"finishedAt,omitempty"`
	EnvdVersion string `json:"envdVersion"`
}

type templateJSON struct {
	TemplateID    string              `json:"templateID"`
	BuildID       string              `json:"buildID"`
	BuildStatus   string              `json:"buildStatus"`
	BuildCount    int                 `json:"buildCount"`
	Names         []string            `json:"names"`
	Aliases       []string            `json:"aliases"`
	Public        bool                `json:"public"`
	CPUCount      int                 `json:"cpuCount"`
	MemoryMB      int                 `json:"memoryMB"`
	DiskSizeMB    int                 `json:"diskSizeMB"`
	EnvdVersion   string              `json:"envdVersion"`
	CreatedAt     string              `json:"createdAt"`
	UpdatedAt     string              `json:"updatedAt"`
	LastSpawnedAt *string             `json:"lastSpawnedAt"`
	SpawnCount    int                 `json:"spawnCount"`
	CreatedBy     *string             `json:"createdBy"`
	Builds        []templateBuildJSON `json:"builds"`
	// StartSnapshot is Cove's: the snapshot the template's sandboxes start from.
	StartSnapshot *cove.TemplateStartSnapshot `json:"startSnapshot,omitempty"`
	// Runtime is Cove's: the engine the template's sandboxes must run on; "" the server's.
	Runtime string `json:"runtime,omitempty"`
}

func (a *api) templateJSON(t *template.Template) templateJSON {
	recs, _ := a.cfg.Builds.List(t.Name)
	j := templateJSON{TemplateID: t.Name, Names: []string{t.Name}, Aliases: []string{t.Name}, BuildStatus: "ready", Public: t.Public || t.TeamID == "",
		CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, EnvdVersion: EnvdVersion, BuildCount: len(recs),
		CreatedAt: t.CreatedAt.Format(time.RFC3339Nano), UpdatedAt: t.CreatedAt.Format(time.RFC3339Nano),
		DiskSizeMB: int(t.SizeBytes >> 20), Builds: []templateBuildJSON{}, Runtime: t.Runtime}
	j.StartSnapshot = startSnapshotJSON(t.StartSnapshot)
	for _, r := range recs {
		b := templateBuildJSON{BuildID: r.ID, Status: r.Status.String(), CPUCount: r.CPUCount, MemoryMB: r.MemoryMB,
			CreatedAt: r.CreatedAt.Format(time.RFC3339Nano), UpdatedAt: r.CreatedAt.Format(time.RFC3339Nano), EnvdVersion: EnvdVersion}
		if r.FinishedAt != nil {
			b.FinishedAt, b.UpdatedAt = r.FinishedAt.Format(time.RFC3339Nano), r.FinishedAt.Format(time.RFC3339Nano)
		}
		if r.Status == build.BuildReady {
			j.BuildID = r.ID
		}
		j.Builds = append(j.Builds, b)
	}
	return j
}

func (a *api) listTemplates(w http.ResponseWriter, _ *http.Request, c caller) error {
	all, err := a.cfg.Builds.Store().List()
	if err != nil {
		return err
	}
	out := make([]templateJSON, 0, len(all))
	for _, t := range all {
		if t.VisibleTo(c.team.ID) {
			out = append(out, a.templateJSON(t))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// visible returns the template ref names when the caller's team may see it, else not found.
func (a *api) visible(ref string, c caller) (*template.Template, error) {
	t, err := a.cfg.Builds.Store().Get(ref)
	if err != nil {
		return nil, err
	}
	if !t.VisibleTo(c.team.ID) {
		return nil, fmt.Errorf("template %s: %w", ref, template.ErrNotFound)
	}
	return t, nil
}

func (a *api) getTemplate(w http.ResponseWriter, r *http.Request, c caller) error {
	t, err := a.visible(templateNameOnly(r.PathValue("templateID")), c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.templateJSON(t))
	return nil
}

func (a *api) updateTemplate(w http.ResponseWriter, r *http.Request, c caller) error {
	var req cove.TemplateUpdateRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	name := templateNameOnly(r.PathValue("templateID"))
	if _, err := a.visible(name, c); err != nil {
		return err
	}
	if err := a.cfg.Builds.Store().CheckOwner(name, c.team.ID); err != nil {
		return err
	}
	if req.Public != nil {
		if err := a.cfg.Builds.Store().SetPublic(name, *req.Public); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string][]string{"names": {name}})
	return nil
}

func (a *api) deleteTemplate(w http.ResponseWriter, r *http.Request, c caller) error {
	if del := a.snapshotDelete(r.PathValue("templateID")); del != nil {
		// A snapshot id: E2B keeps snapshots as templates, and its deleteSnapshot says so.
		// The caller is authenticated already.
		return del(w, r, c)
	}
	name, _ := templateName(r.PathValue("templateID"))
	if _, err := a.cfg.Builds.Store().Get(name); err != nil {
		return err
	}
	if err := a.cfg.Builds.Store().CheckOwner(name, c.team.ID); err != nil {
		return err
	}
	if err := a.cfg.Builds.Store().Remove(name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) templateAlias(w http.ResponseWriter, r *http.Request, c caller) error {
	name := templateNameOnly(r.PathValue("sub"))
	t, err := a.cfg.Builds.Store().Get(name)
	if err != nil {
		return err
	}
	if !t.VisibleTo(c.team.ID) {
		// E2B answers 403 for a name another team holds: taken, but not yours.
		return fmt.Errorf("%w: template %s belongs to another team", errForbidden, name)
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": t.Public || t.TeamID == ""})
	return nil
}

// startSnapshotJSON is a template's start snapshot as the API shows it; nil without one.
func startSnapshotJSON(sn *template.StartSnapshot) *cove.TemplateStartSnapshot {
	if sn == nil {
		return nil
	}
	return &cove.TemplateStartSnapshot{BuildID: sn.BuildID, SizeBytes: sn.Bytes, ReadyMS: sn.ReadyMS, SnapshotMS: sn.SnapshotMS, CreatedAt: sn.CreatedAt}
}

// contentDigest reads an RFC 9530 Content-Digest header's sha-256 (`sha-256=:BASE64:`); ""
// is none. Other algorithms beside it are ignored; a header with no sha-256 is a 400.
func contentDigest(h string) ([]byte, error) {
	if h == "" {
		return nil, nil
	}
	for _, member := range strings.Split(h, ",") {
		alg, val, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || !strings.EqualFold(alg, "sha-256") {
			continue
		}
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			break
		}
		sum, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		if err != nil || len(sum) != sha256.Size {
			break
		}
		return sum, nil
	}
	return nil, fmt.Errorf("%w: Content-Digest: want sha-256=:<base64 of 32 bytes>: (RFC 9530)", errBadRequest)
}
