package cove

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/cove-dev/cove/sdk/buildctx"
)

// TemplateStep is one step of a template definition, in E2B's shape: RUN [cmd, user?],
// COPY [src, dest, user?, mode?], ENV [k, v, ...], WORKDIR [dir], USER [name].
type TemplateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args,omitempty"`
	FilesHash string   `json:"filesHash,omitempty"`
	Force     bool     `json:"force,omitempty"`
}

// TemplateDefinition is what a template build runs: its base, steps, start command and
// ready check (E2B's TemplateBuildStartV2).
type TemplateDefinition struct {
	FromTemplate string         `json:"fromTemplate,omitempty"`
	Steps        []TemplateStep `json:"steps,omitempty"`
	StartCmd     string         `json:"startCmd,omitempty"`
	ReadyCmd     string         `json:"readyCmd,omitempty"`
	Force        bool           `json:"force,omitempty"`
}

// TemplateBuildOptions tune BuildTemplate.
type TemplateBuildOptions struct {
	// ContextDir is the directory COPY sources are relative to; "." when empty.
	ContextDir string
	// CPUCount and MemoryMB size the template's sandboxes (0: the server's default).
	CPUCount, MemoryMB int
	// Runtime is the engine the template's sandboxes must run on: "runc", or "runsc"
	// (gVisor); "" leaves it to the server's default (Cove's extension).
	Runtime string
	// OnLog receives the build's log lines as the steps run.
	OnLog func(BuildLogEntry)
	// PollInterval is how often the build's status is read; 200 ms when zero.
	PollInterval time.Duration
}

// BuildLogEntry is one build log line.
type BuildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// TemplateBuildStatus is a build's state (E2B's TemplateBuildInfo).
type TemplateBuildStatus struct {
	BuildID    string          `json:"buildID"`
	TemplateID string          `json:"templateID"`
	Status     string          `json:"status"` // waiting, building, ready or error
	LogEntries []BuildLogEntry `json:"logEntries"`
	Reason     *struct {
		Message    string          `json:"message"`
		Step       string          `json:"step,omitempty"`
		LogEntries []BuildLogEntry `json:"logEntries"`
	} `json:"reason,omitempty"`
	// StartSnapshot is the start snapshot a ready build took or reused (Cove's extension).
	StartSnapshot *TemplateStartSnapshot `json:"startSnapshot,omitempty"`
}

// TemplateInfo is a template as the API lists it.
type TemplateInfo struct {
	TemplateID  string    `json:"templateID"`
	BuildID     string    `json:"buildID"`
	Names       []string  `json:"names"`
	CPUCount    int       `json:"cpuCount"`
	MemoryMB    int       `json:"memoryMB"`
	DiskSizeMB  int       `json:"diskSizeMB"`
	BuildCount  int       `json:"buildCount"`
	CreatedAt   time.Time `json:"createdAt"`
	BuildStatus string    `json:"buildStatus"`
	// StartSnapshot is set when the template's sandboxes start from a snapshot taken at
	// the end of its build, its start command running and past its ready check.
	StartSnapshot *TemplateStartSnapshot `json:"startSnapshot,omitempty"`
	// Runtime is the engine the template's sandboxes must run on; "" the server's default.
	Runtime string `json:"runtime,omitempty"`
}

// TemplateStartSnapshot is a template's start snapshot (Cove's extension of E2B's template).
type TemplateStartSnapshot struct {
	BuildID   string `json:"buildID"`
	SizeBytes int64  `json:"sizeBytes"` // on disk
	// ReadyMS is how long the start command took to pass its ready check at build: the
	// wait a create from the template no longer has. SnapshotMS is the checkpoint's time.
	ReadyMS    int64     `json:"readyMs"`
	SnapshotMS int64     `json:"snapshotMs"`
	CreatedAt  time.Time `json:"createdAt"`
}

// BuildError is a template build that failed: its message names the step and its last lines.
type BuildError struct {
	TemplateID, BuildID, Step, Message string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("build %s of template %s failed at step %s: %s", e.BuildID, e.TemplateID, e.Step, e.Message)
}

// BuildTemplate builds (or rebuilds) the template name from def as E2B's SDKs do: it asks
// for a build, uploads the files of COPY steps the server lacks, starts the build and follows
// it to the end. Steps whose inputs did not change come from the server's layer cache.
func (c *Client) BuildTemplate(ctx context.Context, name string, def TemplateDefinition, opts TemplateBuildOptions) (*TemplateBuildStatus, error) {
	const op = "build template"
	var req struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	if _, err := c.do(ctx, op, "", http.MethodPost, "/v3/templates",
		map[string]any{"name": name, "cpuCount": opts.CPUCount, "memoryMB": opts.MemoryMB, "runtime": opts.Runtime}, &req); err != nil {
		return nil, err
	}
	dir := opts.ContextDir
	if dir == "" {
		dir = "."
	}
	steps := append([]TemplateStep(nil), def.Steps...)
	for i, st := range steps {
		if st.Type != "COPY" || len(st.Args) < 2 {
			continue
		}
		var tar bytes.Buffer
		hash, err := buildctx.ArchiveContext(dir, st.Args[0], st.Args[1], &tar)
		if err != nil {
			return nil, &Error{Op: op, Message: err.Error(), Err: err}
		}
		steps[i].FilesHash = hash
		var link struct {
			Present bool   `json:"present"`
			URL     string `json:"url"`
		}
		if _, err := c.do(ctx, op, "", http.MethodGet, "/templates/"+url.PathEscape(req.TemplateID)+"/files/"+hash, nil, &link); err != nil {
			return nil, err
		}
		if link.Present {
			continue
		}
		up, err := http.NewRequestWithContext(ctx, http.MethodPut, link.URL, bytes.NewReader(tar.Bytes()))
		if err != nil {
			return nil, &Error{Op: op, Message: err.Error(), Err: err}
		}
		// The server refuses a body cut or changed on the way (RFC 9530).
		sum := sha256.Sum256(tar.Bytes())
		up.Header.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
		res, err := c.http.Do(up)
		if err != nil {
			return nil, &Error{Op: op, Message: "upload " + st.Args[0] + ": " + err.Error(), Err: err}
		}
		res.Body.Close()
		if res.StatusCode >= 400 {
			return nil, &Error{Op: op, StatusCode: res.StatusCode, Message: "upload " + st.Args[0] + ": " + res.Status}
		}
	}
	def.Steps = steps
	path := "/templates/" + url.PathEscape(req.TemplateID) + "/builds/" + url.PathEscape(req.BuildID)
	if _, err := c.do(ctx, op, "", http.MethodPost, "/v2"+path, def, nil); err != nil {
		return nil, err
	}
	every := opts.PollInterval
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	offset := 0
	for {
		st, err := c.TemplateBuild(ctx, req.TemplateID, req.BuildID, offset)
		if err != nil {
			return nil, err
		}
		offset += len(st.LogEntries)
		if opts.OnLog != nil {
			for _, e := range st.LogEntries {
				opts.OnLog(e)
			}
		}
		switch st.Status {
		case "ready":
			return st, nil
		case "error":
			e := &BuildError{TemplateID: st.TemplateID, BuildID: st.BuildID, Message: "unknown error"}
			if st.Reason != nil {
				e.Step, e.Message = st.Reason.Step, st.Reason.Message
			}
			return st, e
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s %s: %w", op, name, context.Cause(ctx))
		case <-time.After(every):
		}
	}
}

// Templates lists the server's templates.
func (c *Client) Templates(ctx context.Context) ([]TemplateInfo, error) {
	var out []TemplateInfo
	_, err := c.do(ctx, "list templates", "", http.MethodGet, "/templates", nil, &out)
	return out, err
}

// Template returns the template name.
func (c *Client) Template(ctx context.Context, name string) (*TemplateInfo, error) {
	var out TemplateInfo
	if _, err := c.do(ctx, "get template", "", http.MethodGet, "/templates/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteTemplate removes the template name and frees the layers no other template uses.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	_, err := c.do(ctx, "delete template", "", http.MethodDelete, "/templates/"+url.PathEscape(name), nil, nil)
	return err
}

// TemplateTag is one tag of a template: the build it names.
type TemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// TemplateTags lists the tags of template name ("default" is its latest build).
func (c *Client) TemplateTags(ctx context.Context, name string) ([]TemplateTag, error) {
	var out []TemplateTag
	_, err := c.do(ctx, "template tags", "", http.MethodGet, "/templates/"+url.PathEscape(name)+"/tags", nil, &out)
	return out, err
}

// TagTemplate gives the build target ("name" or "name:tag") the tags; sandboxes start from
// "name:tag" even after name is rebuilt.
func (c *Client) TagTemplate(ctx context.Context, target string, tags ...string) error {
	_, err := c.do(ctx, "tag template", "", http.MethodPost, "/templates/tags", map[string]any{"target": target, "tags": tags}, nil)
	return err
}

// UntagTemplate removes tags of template name.
func (c *Client) UntagTemplate(ctx context.Context, name string, tags ...string) error {
	_, err := c.do(ctx, "untag template", "", http.MethodDelete, "/templates/tags", map[string]any{"name": name, "tags": tags}, nil)
	return err
}

// TemplateBuild returns the status of build buildID of template name, with its log lines
// from offset on.
func (c *Client) TemplateBuild(ctx context.Context, name, buildID string, offset int) (*TemplateBuildStatus, error) {
	var st TemplateBuildStatus
	_, err := c.do(ctx, "template build", "", http.MethodGet, fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", url.PathEscape(name), url.PathEscape(buildID), offset), nil, &st)
	if err != nil {
		return nil, err
	}
	return &st, nil
}
