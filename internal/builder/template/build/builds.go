package build

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	ggcrname "github.com/google/go-containerregistry/pkg/name"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build/oci"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// BuildStatus is where a requested build is: E2B's TemplateBuildStatus.
type BuildStatus string

// The build statuses.
const (
	BuildWaiting  BuildStatus = "waiting" // requested; files may be uploading
	BuildBuilding BuildStatus = "building"
	BuildReady    BuildStatus = "ready"
	BuildError    BuildStatus = "error"
)

func (s BuildStatus) String() string {
	if s == "" {
		return string(BuildWaiting)
	}
	return string(s)
}

// ParseBuildStatus reads a build status, rejecting unknown ones.
func ParseBuildStatus(s string) (BuildStatus, error) {
	switch b := BuildStatus(s); b {
	case BuildWaiting, BuildBuilding, BuildReady, BuildError:
		return b, nil
	}
	return "", fmt.Errorf("%w: unknown build status %q", template.ErrInvalid, s)
}

// e2bBaseImage is the image E2B's SDKs build on when a template names no base.
const e2bBaseImage = "e2bdev/base"

// ReasonOrphaned is the reason of a build the server stopped in the middle of (a crash).
const ReasonOrphaned = "orphaned"

// BuildReason says why a build failed: the message, the step ("1".., "finalize") and the
// last log lines.
type BuildReason struct {
	Message string     `json:"message"`
	Step    string     `json:"step,omitempty"`
	Code    string     `json:"code,omitempty"` // ReasonOrphaned, or "" for a failed step
	Lines   []LogEntry `json:"lines,omitempty"`
}

// LogEntry is one build log line.
type LogEntry struct {
	Time    time.Time `json:"timestamp"`
	Level   string    `json:"level"` // info, error
	Message string    `json:"message"`
	Step    string    `json:"step,omitempty"`
}

// BuildRecord is one requested build: what was asked, by which request, and how it went.
type BuildRecord struct {
	ID         string                `json:"id"`
	Template   string                `json:"template"`
	Tags       []string              `json:"tags,omitempty"`
	Status     BuildStatus           `json:"status"`
	Reason     *BuildReason          `json:"reason,omitempty"`
	RequestID  string                `json:"request_id,omitempty"`
	TeamID     string                `json:"team_id,omitempty"`
	CPUCount   int                   `json:"cpu_count,omitempty"`
	MemoryMB   int                   `json:"memory_mb,omitempty"`
	Runtime    string                `json:"runtime,omitempty"` // the engine its sandboxes must run on; "" the server's default
	Steps      []template.StepResult `json:"steps,omitempty"`
	CreatedAt  time.Time             `json:"created_at"`
	StartedAt  *time.Time            `json:"started_at,omitempty"`
	FinishedAt *time.Time            `json:"finished_at,omitempty"`
	// StartSnapshot is the start snapshot the build took (startsnap.go); nil without one.
	StartSnapshot *template.StartSnapshot `json:"start_snapshot,omitempty"`
	// Node is the cluster node that runs the build (or will: the one it was asked on, until
	// it starts); "" on a lone server. Only that node fails it as orphaned when it starts
	// again: the records are shared by every node of a cluster.
	Node string `json:"node,omitempty"`
}

// BuildRequest is the definition a requested build runs (E2B's TemplateBuildStartV2).
type BuildRequest struct {
	FromTemplate string          `json:"fromTemplate,omitempty"`
	FromImage    string          `json:"fromImage,omitempty"`
	Steps        []template.Step `json:"steps,omitempty"`
	StartCmd     string          `json:"startCmd,omitempty"`
	ReadyCmd     string          `json:"readyCmd,omitempty"`
	Force        bool            `json:"force,omitempty"`
	// FromImageRegistry logs in to FromImage's registry.
	FromImageRegistry *RegistryAuth `json:"fromImageRegistry,omitempty"`
}

// RegistryAuth is E2B's FromImageRegistry; Cove takes type "registry" (username and password).
type RegistryAuth struct {
	Type     string `json:"type"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// Builds runs builds asked for over the API in the background, one at a time per template
// name. Their records and log lines live in the server's store (store.TemplateBuilds: SQLite
// or PostgreSQL); the uploaded files COPY steps use are files (<dir>/uploads/<team>/<hash>.tar),
// dir being the server's data dir (the template store may be shared by several servers). A
// record still building when the process died is failed with reason orphaned when Builds
// opens.
type Builds struct {
	store *Builder
	db    store.TemplateBuilds
	root  string
	node  string // the cluster node this is; "" on a lone server

	mu     sync.Mutex
	cancel map[string]context.CancelFunc
	using  map[string]int // "<team>/<hash>": uploads builds of this process read (see use)
	wg     sync.WaitGroup

	// Log lines wait in pending until a flush writes them to db in one batch: every
	// logFlushEvery, at logBatch lines, and before anything reads the build's log. seq
	// numbers each running build's next line. A build's log is cut at maxBuildLog bytes.
	logMu   sync.Mutex // held across a flush, so batches reach db in order
	pending map[string][]store.BuildLogLine
	seq     map[string]int64
	size    map[string]int64 // bytes logged, cut at logCap
	logCap  int64            // maxBuildLog when 0
	stop    chan struct{}
	flushed chan struct{}

	sandbox Sandbox
}

// Log lines are written in batches: a line-per-write would cost an fsync each on SQLite.
const (
	logFlushEvery = 200 * time.Millisecond
	logBatch      = 500
)

// OpenBuilds opens the build records db keeps, moving into it those an older Cove wrote as
// files under dir/builds, and fails the builds of this node (node, "" on a lone server) a
// crash left waiting or building; the builds build into ts.
func OpenBuilds(ctx context.Context, ts *Builder, db store.TemplateBuilds, dir, node string) (*Builds, error) {
	b := &Builds{store: ts, db: db, root: dir, node: node, cancel: map[string]context.CancelFunc{}, using: map[string]int{},
		pending: map[string][]store.BuildLogLine{}, seq: map[string]int64{}, size: map[string]int64{}, stop: make(chan struct{}), flushed: make(chan struct{})}
	for _, d := range []string{b.dir(), b.Uploads()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := template.Private(b.Uploads()); err != nil { // teams' files: no local user reads them
		return nil, err
	}
	if err := migrateBuildFiles(ctx, db, b.dir()); err != nil {
		return nil, err
	}
	recs, err := b.List("")
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	for _, r := range recs {
		if (r.Status == BuildWaiting || r.Status == BuildBuilding) && r.Node == node {
			r.Status, r.FinishedAt = BuildError, &now
			r.Reason = &BuildReason{Code: ReasonOrphaned, Message: "the server stopped during the build (orphaned); no template was made"}
			if err := b.save(r); err != nil {
				return nil, err
			}
		}
	}
	go b.flushLoop()
	return b, nil
}

// migrateBuildFiles moves the build records an older Cove kept as files (<dir>/<id>.json)
// into db, removing each file once db has it: a crash in between puts the same record again
// at the next start. Their logs were never in the files: they stay where that Cove put them.
func migrateBuildFiles(ctx context.Context, db store.TemplateBuilds, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("move build records into the store: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), ".") && strings.HasSuffix(e.Name(), ".json.tmp") {
			_ = os.Remove(p) // a save a crash cut short: the record before it is the file's
			continue
		}
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validBuildID(id) || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("move build record %s into the store: %w", id, err)
		}
		var r BuildRecord
		if err := json.Unmarshal(data, &r); err != nil || r.ID != id {
			telemetry.Logger(ctx).Warn("build record file unreadable: left in place", telemetry.KeyPath, p, telemetry.KeyError, fmt.Sprint(err))
			continue
		}
		row, err := buildRow(&r)
		if err != nil {
			return err
		}
		if err := db.PutTemplateBuild(ctx, row); err != nil {
			return fmt.Errorf("move build record %s into the store: %w", id, err)
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("move build record %s into the store: %w", id, err)
		}
	}
	return nil
}

// dir holds the builds' step disk images (Spec.DiskImages); an older Cove kept the build
// records there too, as <id>.json, which OpenBuilds moves into the store.
func (b *Builds) dir() string { return filepath.Join(b.root, "builds") }

// Uploads is the directory of uploaded COPY archives.
func (b *Builds) Uploads() string { return filepath.Join(b.root, "uploads") }

// teamUploads is where team's archives are, <hash>.tar: each team's uploads are its own, so
// no team can put content under a hash another team's COPY names.
func (b *Builds) teamUploads(team string) string {
	if team == "" {
		team = "_"
	}
	return filepath.Join(b.Uploads(), team)
}

// Store is the template store the builds build into.
func (b *Builds) Store() *template.Store { return b.store.Store }

// buildRow is r as the store keeps it.
func buildRow(r *BuildRecord) (*store.TemplateBuild, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", r.ID, err)
	}
	return &store.TemplateBuild{ID: r.ID, Template: r.Template, TeamID: r.TeamID, Status: r.Status.String(),
		CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Record: data}, nil
}

func fromRow(row *store.TemplateBuild) (*BuildRecord, error) {
	var r BuildRecord
	if err := json.Unmarshal(row.Record, &r); err != nil {
		return nil, fmt.Errorf("build %s: %w", row.ID, err)
	}
	return &r, nil
}

func (b *Builds) save(r *BuildRecord) error {
	row, err := buildRow(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.db.PutTemplateBuild(ctx, row)
}

// Get returns the build id, or ErrNotFound.
func (b *Builds) Get(id string) (*BuildRecord, error) {
	if !validBuildID(id) {
		return nil, fmt.Errorf("build %q: %w", id, template.ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	row, err := b.db.GetTemplateBuild(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("build %s: %w", id, template.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return fromRow(row)
}

// List returns the builds of template name ("" for all), oldest first.
func (b *Builds) List(name string) ([]*BuildRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := b.db.ListTemplateBuilds(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]*BuildRecord, 0, len(rows))
	for _, row := range rows {
		r, err := fromRow(row)
		if err != nil {
			continue // not a record this Cove reads
		}
		out = append(out, r)
	}
	return out, nil
}

// NewBuild is what a new build asks for before its definition arrives.
type NewBuild struct {
	Name string
	Tags []string
	// CPUCount and MemoryMB size the template's sandboxes (0: the server's default).
	CPUCount, MemoryMB int
	// Runtime is the engine the template's sandboxes must run on (runc, runsc); "" leaves it
	// to the server's default.
	Runtime   string
	RequestID string
	TeamID    string
}

// Request records a new build, waiting for its definition (Start).
func (b *Builds) Request(req NewBuild) (*BuildRecord, error) {
	name, tags, cpuCount, memoryMB, requestID, teamID := req.Name, req.Tags, req.CPUCount, req.MemoryMB, req.RequestID, req.TeamID
	if req.Runtime != "" {
		if _, err := runtime.ParseEngine(req.Runtime); err != nil {
			return nil, fmt.Errorf("%w: runtime: %v", template.ErrInvalid, err)
		}
	}
	if err := template.ValidName(name); err != nil {
		return nil, err
	}
	if name == "base" {
		return nil, fmt.Errorf("%w: base is the default template; it is built on the host (cove template build base)", template.ErrInvalid)
	}
	if err := b.store.CheckOwner(name, teamID); err != nil {
		return nil, err
	}
	for _, t := range tags {
		if err := template.ValidName(t); err != nil {
			return nil, fmt.Errorf("tag: %w", err)
		}
	}
	if cpuCount < 0 || memoryMB < 0 {
		return nil, fmt.Errorf("%w: cpuCount and memoryMB must not be negative", template.ErrInvalid)
	}
	r := &BuildRecord{ID: newBuildID(), Template: name, Tags: tags, Status: BuildWaiting, RequestID: requestID,
		TeamID: teamID, CPUCount: cpuCount, MemoryMB: memoryMB, Runtime: req.Runtime, CreatedAt: time.Now().UTC(), Node: b.node}
	if _, _, _, err := b.stepSandbox(r); err != nil {
		return nil, err // over the team's limits
	}
	return r, b.save(r)
}

// Start runs the waiting build id with the definition req in the background. It checks
// what can be checked first (the steps, the base, the uploads), so a bad definition fails
// the call and leaves the build waiting.
func (b *Builds) Start(ctx context.Context, id, name string, req BuildRequest) error {
	r, err := b.Get(id)
	if err != nil {
		return err
	}
	if r.Template != name {
		return fmt.Errorf("build %s is not a build of %s: %w", id, name, template.ErrNotFound)
	}
	if r.Status != BuildWaiting {
		return fmt.Errorf("%w: build %s is %s already", template.ErrExists, id, r.Status)
	}
	switch {
	case req.FromImage != "" && req.FromTemplate != "":
		return fmt.Errorf("%w: give fromTemplate or fromImage, not both", template.ErrInvalid)
	case req.FromImage == "" && req.FromTemplate == "":
		return fmt.Errorf("%w: fromTemplate or fromImage is required", template.ErrInvalid)
	case req.FromImageRegistry != nil && req.FromImageRegistry.Type != "registry":
		return fmt.Errorf("%w: fromImageRegistry type %q is not supported (only \"registry\", with username and password)", template.ErrInvalid, req.FromImageRegistry.Type)
	case (req.FromImage == e2bBaseImage || strings.HasPrefix(req.FromImage, e2bBaseImage+":")) && b.templateUsable("base", r.TeamID):
		// The SDK's Template() with no from* builds on E2B's base image: Cove's base is that.
		req.FromTemplate, req.FromImage = "base", ""
	case req.FromImage != "" && template.ValidName(req.FromImage) == nil && b.templateUsable(req.FromImage, r.TeamID):
		// fromDockerfile sends FROM as fromImage: a Dockerfile FROM a Cove template builds on it.
		req.FromTemplate, req.FromImage = req.FromImage, ""
	case req.FromImage != "":
		ref, err := ggcrname.ParseReference(req.FromImage)
		if err != nil {
			return fmt.Errorf("%w: fromImage: %v", template.ErrInvalid, err)
		}
		// A registry the pull may not reach is refused now; one that does not resolve yet
		// fails the build (the pull checks every address again when it dials).
		if err := b.pullGuard(r.TeamID).Check(ctx, ref.Context().RegistryStr()); errors.Is(err, oci.ErrRefused) {
			return fmt.Errorf("fromImage: %w", err)
		}
	default:
		t, err := b.store.Get(req.FromTemplate)
		if err == nil && !t.VisibleTo(r.TeamID) {
			err = fmt.Errorf("template %s: %w", req.FromTemplate, template.ErrNotFound) // another team's
		}
		if err != nil {
			return fmt.Errorf("%w: fromTemplate: %v", template.ErrInvalid, err)
		}
	}
	// Retention keeps the uploads from here on, until the build lets go of them just before
	// its record says it ended (so a prune after a finished record finds them free).
	release := sync.OnceFunc(b.use(r.TeamID, req))
	for i, st := range req.Steps {
		if err := st.Validate(i); err != nil {
			release()
			return err
		}
		if st.Kind == template.StepCopy {
			if !b.HasUpload(r.TeamID, st.FilesHash) {
				release()
				return fmt.Errorf("%w: step %d (COPY %s): no files were uploaded for hash %s", template.ErrInvalid, i+1, st.Args[0], st.FilesHash)
			}
		}
	}
	now := time.Now().UTC()
	r.Status, r.StartedAt, r.Node = BuildBuilding, &now, b.node
	if err := b.save(r); err != nil {
		release()
		return err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bctx, stopTimer := b.timeLimited(bctx)
	b.mu.Lock()
	b.cancel[id] = cancel
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		defer stopTimer()
		defer release() // when run panics
		b.run(bctx, r, req, release)
	}()
	return nil
}

func (b *Builds) log(r *BuildRecord, step, level, msg string) {
	b.logMu.Lock()
	n := b.seq[r.ID]
	limit := cmp.Or(b.logCap, maxBuildLog)
	size := b.size[r.ID] + int64(len(msg)) + 1
	switch {
	case size <= limit || level == "error": // how the build ended is always told
	case size-int64(len(msg))-1 <= limit:
		msg, level = fmt.Sprintf("==> build log cut at %d bytes: later output is not kept", limit), "info"
	default:
		b.logMu.Unlock()
		return
	}
	b.seq[r.ID], b.size[r.ID] = n+1, size
	b.pending[r.ID] = append(b.pending[r.ID], store.BuildLogLine{Seq: n, Time: time.Now().UTC(), Level: level, Step: step, Message: msg})
	full := len(b.pending[r.ID]) >= logBatch
	b.logMu.Unlock()
	if full {
		b.flush(r.ID)
	}
}

// flush writes the pending lines of build id ("" for every build) to the store. A batch
// the store refuses is dropped, with a warning: a build's log must not stop its build.
func (b *Builds) flush(id string) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	for bid, lines := range b.pending {
		if id != "" && bid != id {
			continue
		}
		delete(b.pending, bid)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.db.AppendBuildLog(ctx, bid, lines)
		cancel()
		if err != nil {
			telemetry.Logger(context.Background()).Warn("build log lines lost", telemetry.KeyBuildID, bid, telemetry.KeyLines, len(lines), telemetry.KeyError, err.Error())
		}
	}
}

// flushLoop flushes every build's pending lines every logFlushEvery until Close.
func (b *Builds) flushLoop() {
	defer close(b.flushed)
	t := time.NewTicker(logFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			b.flush("")
			return
		case <-t.C:
			b.flush("")
		}
	}
}

func (b *Builds) run(ctx context.Context, r *BuildRecord, req BuildRequest, release func()) {
	finish := func(t *template.Template, err error) {
		release()
		err = timeLimitReason(ctx, err)
		var tl *BuildTimeLimitError
		if errors.As(err, &tl) && b.sandbox.OnTimeLimit != nil {
			b.sandbox.OnTimeLimit(r.TeamID, fmt.Sprintf("build %s of template %s: %v", r.ID, r.Template, tl))
		}
		b.finish(r, t, err)
	}
	if req.FromImage != "" {
		var cred oci.Credentials
		if a := req.FromImageRegistry; a != nil {
			cred = oci.Credentials{Username: a.Username, Password: a.Password}
		}
		t, err := b.store.EnsureImage(ctx, req.FromImage, cred, b.pullGuard(r.TeamID), logWriter(func(line string) { b.log(r, "base", "info", line) }))
		if err != nil {
			finish(nil, &StepError{Index: 0, Step: template.Step{Kind: "FROM", Args: []string{req.FromImage}}, Err: err})
			return
		}
		req.FromTemplate = t.Name
	}
	net, cpus, mem, err := b.stepSandbox(r)
	if err != nil {
		finish(nil, err)
		return
	}
	disk := "no disk limit"
	if b.sandbox.DiskSizeMB > 0 {
		disk = fmt.Sprintf("%d MB of disk per step", b.sandbox.DiskSizeMB)
	}
	b.log(r, "base", "info", fmt.Sprintf("==> steps run in a sandbox: %d CPUs, %d MB, %s, %s", cpus, mem, disk, net))
	spec := Spec{Name: r.Template, Network: net, Limits: runtime.Limits{CPUs: float64(cpus), MemoryBytes: int64(mem) << 20, DiskBytes: int64(b.sandbox.DiskSizeMB) << 20}, From: req.FromTemplate, Steps: req.Steps, Files: DirSource(b.teamUploads(r.TeamID)), Scope: r.TeamID,
		StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, CPUCount: r.CPUCount, MemoryMB: r.MemoryMB, Runtime: r.Runtime,
		Force: req.Force, Replace: true, BuildID: r.ID, TeamID: r.TeamID, DiskImages: b.dir(),
		Log: func(step, line string) { b.log(r, step, "info", line) }}
	t, err := b.store.Build(ctx, spec, io.Discard)
	finish(t, err)
}

// finish records how the build r ended: t built, or err.
func (b *Builds) finish(r *BuildRecord, t *template.Template, err error) {
	now := time.Now().UTC()
	r.FinishedAt = &now
	if err != nil {
		r.Status = BuildError
		r.Reason = &BuildReason{Message: err.Error(), Step: "finalize"}
		var se *StepError
		if errors.As(err, &se) {
			r.Reason.Step = fmt.Sprint(se.Index)
			if se.Index == 0 {
				r.Reason.Step = "base"
			}
		}
		b.log(r, r.Reason.Step, "error", err.Error())
		b.logMu.Lock()
		n := int(b.seq[r.ID]) // every line the build logged, pending ones too
		b.logMu.Unlock()
		r.Reason.Lines = b.Logs(r, max(n-10, 0)) // the last ten, without reading the whole log
	} else {
		r.Status, r.Steps = BuildReady, t.Built
		r.StartSnapshot = t.StartSnapshot
		for _, tag := range r.Tags {
			if tag == template.DefaultTag {
				continue
			}
			if _, err := b.store.SetTag(t.Name, tag); err != nil {
				b.log(r, "finalize", "error", fmt.Sprintf("tag %s: %v", tag, err))
			}
		}
	}
	_ = b.save(r)
	b.logMu.Lock()
	delete(b.seq, r.ID) // the build logs no more: its pending lines keep their numbers
	delete(b.size, r.ID)
	b.logMu.Unlock()
}

// templateUsable reports whether team may build on the template name.
func (b *Builds) templateUsable(name, team string) bool {
	t, err := b.store.Get(name)
	return err == nil && t.VisibleTo(team)
}

// logWriter turns writes of whole lines into calls of f, one per line.
type logWriter func(line string)

func (f logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		f(l)
	}
	return len(p), nil
}

// Logs returns the log entries of build r from offset on, from the store (a store error
// reads as no lines: the record still says how it ended).
func (b *Builds) Logs(r *BuildRecord, offset int) []LogEntry {
	if offset < 0 {
		return []LogEntry{}
	}
	b.flush(r.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lines, err := b.db.BuildLog(ctx, r.ID, offset, 0)
	if err != nil {
		return []LogEntry{}
	}
	out := make([]LogEntry, len(lines))
	for i, l := range lines {
		out[i] = LogEntry{Time: l.Time, Level: l.Level, Message: l.Message, Step: l.Step}
	}
	return out
}

// HasUpload reports whether team uploaded the files of hash.
func (b *Builds) HasUpload(team, hash string) bool {
	_, err := os.Stat(filepath.Join(b.teamUploads(team), hash+".tar"))
	return template.ValidHash(hash) && err == nil
}

// Upload stores team's archive of hash read from r (at most max bytes), complete or not at
// all: a body that is no whole tar (gzipped or not) is refused, and so is one whose sha256
// is not digest, when the client sent one (nil: none).
//
// The files hash is the client's cache key, not a checksum the server can recompute: E2B's
// SDKs hash the step's text and each file's host stat (directory sizes among them), which no
// archive carries. Uploads are kept per team, so a hash only ever names the team's own bytes.
func (b *Builds) Upload(team, hash string, r io.Reader, max int64, digest []byte) error {
	if !template.ValidHash(hash) {
		return fmt.Errorf("%w: files hash %q is not a hex sha256", template.ErrInvalid, hash)
	}
	if digest != nil && len(digest) != sha256.Size {
		return fmt.Errorf("%w: upload %s: the content digest is %d bytes, not a sha-256", template.ErrInvalid, hash, len(digest))
	}
	dir := b.teamUploads(team)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+hash+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), io.LimitReader(r, max+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("upload %s: %w", hash, err)
	}
	if n > max {
		return fmt.Errorf("%w: upload %s is larger than %d bytes", template.ErrInvalid, hash, max)
	}
	if digest != nil && !bytes.Equal(sum.Sum(nil), digest) {
		return fmt.Errorf("%w: upload %s: the body's sha-256 is not the Content-Digest sent with it (cut or changed on the way)", template.ErrInvalid, hash)
	}
	if err := wholeArchive(f.Name()); err != nil {
		return fmt.Errorf("%w: upload %s is not a whole tar archive: %v", template.ErrInvalid, hash, err)
	}
	return os.Rename(f.Name(), filepath.Join(dir, hash+".tar"))
}

// wholeArchive reads the archive at p to its end, as a COPY step will: a cut or corrupt
// tar, or gzip stream, is an error now rather than a build failing later.
func wholeArchive(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	var tail zeroTail
	r = io.TeeReader(r, &tail)
	tr := tar.NewReader(r)
	for {
		if _, err := tr.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return err
		}
	}
	// A gzip stream checks its length and CRC at its end, after the tar's last block.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	// The tar reader takes a stream cut between two entries for a short archive: a whole
	// one ends in two zero blocks.
	if tail < 2*512 {
		return errors.New("no end-of-archive marker: the upload was cut")
	}
	return nil
}

// zeroTail counts the zero bytes that end what was written to it.
type zeroTail int

func (z *zeroTail) Write(p []byte) (int, error) {
	i := len(p) - 1
	for i >= 0 && p[i] == 0 {
		i--
	}
	if i < 0 {
		*z += zeroTail(len(p))
	} else {
		*z = zeroTail(len(p) - 1 - i)
	}
	return len(p), nil
}

// Close cancels the builds running in this process and waits for them: they end failed.
// Their last log lines are written before it returns.
func (b *Builds) Close() {
	b.mu.Lock()
	for _, c := range b.cancel {
		c()
	}
	b.mu.Unlock()
	b.wg.Wait()
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.flushed
}

func newBuildID() string {
	u := make([]byte, 16)
	rand.Read(u)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func validBuildID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, c := range id {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
