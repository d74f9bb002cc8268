package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// This file: filesystem-only pauses (E2B's keepMemory: false). The pause stops the
// sandbox's processes and keeps its files; the resume cold-boots it on them, with the same
// id, access token, environment, network and metadata, and runs its template's start
// command and ready check again. Traffic never resumes such a sandbox: what a request
// would reach is a machine that rebooted, which only an explicit connect or resume asks for.

// bootEnvSuffix names, in the vault, the environment envd had when its sandbox was paused
// without memory: the env var values are never stored in the clear, and the reboot gives
// them to the new envd.
const bootEnvSuffix = "-env"

// filesKeeper is the runtime's filesystem-only side, or an error saying why there is none.
func (o *Orchestrator) filesKeeper() (runtime.FilesKeeper, error) {
	fk, ok := o.cfg.Runtime.(runtime.FilesKeeper)
	if !ok {
		return nil, fmt.Errorf("%w: this runtime cannot pause a sandbox keeping only its files", ErrInvalid)
	}
	return fk, nil
}

// stopKeepFiles is the filesystem-only pause: envd's environment is kept (sealed), then the
// processes are stopped with the files kept. On failure before the stop the sandbox runs
// on. Caller holds e.mu; it returns the kept files' size.
func (o *Orchestrator) stopKeepFiles(ctx context.Context, e *entry) (runtime.KeptFiles, error) {
	fk, err := o.filesKeeper()
	if err != nil {
		return runtime.KeptFiles{}, err
	}
	env, err := envdEnv(ctx, e.envd, e.sb.EnvdAccessToken)
	if err != nil {
		return runtime.KeptFiles{}, fmt.Errorf("read envd's environment to keep it: %w", err)
	}
	if err := o.keepBootEnv(e, env); err != nil {
		return runtime.KeptFiles{}, err
	}
	e.closeAll()
	if e.envd != nil {
		e.envd.CloseIdleConnections()
	}
	e.stopWatching()
	kept, err := fk.StopKeepFiles(ctx, e.sb.ID)
	if err != nil {
		// It may run on (the kill failed), or be dead, which its init's watch acts on.
		o.watchOOM(ctx, e)
		o.dropBootEnv(ctx, e)
		return runtime.KeptFiles{}, err
	}
	o.endCommands(ctx, e)
	return kept, nil
}

// endCommands ends the records of the commands the stop ended, once the output they wrote
// before it is read (their pipes end with the processes). Caller holds e.mu.
func (o *Orchestrator) endCommands(ctx context.Context, e *entry) {
	if e.collector == nil {
		return
	}
	drained := make(chan struct{})
	go func() { e.drainers.Wait(); close(drained) }()
	select {
	case <-drained:
		e.collector.SandboxPaused(ctx, time.Now())
	case <-time.After(5 * time.Second):
		o.logger(ctx).Warn("the stopped sandbox's output did not end: its running commands' records stay open")
	}
}

// keepBootEnv keeps env for e's reboot: in memory, and sealed in the vault so a server that
// adopts the paused sandbox after a restart reboots it with the same environment.
func (o *Orchestrator) keepBootEnv(e *entry, env map[string]string) error {
	e.bootEnv = env
	if o.cfg.Vault == nil {
		return nil
	}
	pairs := make([]string, 0, len(env))
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	if err := o.cfg.Vault.Put(e.sb.ID+bootEnvSuffix, pairs); err != nil {
		return fmt.Errorf("keep the sandbox's environment for its reboot: %w", err)
	}
	return nil
}

// bootEnvOf is the environment kept for e's reboot: in memory, or (adopted after a
// restart) from the vault.
func (o *Orchestrator) bootEnvOf(e *entry) (map[string]string, error) {
	if e.bootEnv != nil || o.cfg.Vault == nil {
		return e.bootEnv, nil
	}
	pairs, err := o.cfg.Vault.Get(e.sb.ID + bootEnvSuffix)
	if err != nil {
		return nil, fmt.Errorf("open the environment kept for the reboot: %w", err)
	}
	env := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		env[k] = v
	}
	return env, nil
}

// dropBootEnv removes the kept environment once it is not needed (a reboot, a kill).
func (o *Orchestrator) dropBootEnv(ctx context.Context, e *entry) {
	e.bootEnv = nil
	if o.cfg.Vault == nil {
		return
	}
	if err := o.cfg.Vault.Delete(e.sb.ID + bootEnvSuffix); err != nil {
		o.logger(ctx).Error("the environment kept for a reboot was not removed", "error", err.Error())
	}
}

// envdEnv reads the environment envd gives every process (GET /envs).
func envdEnv(ctx context.Context, c *http.Client, token string) (map[string]string, error) {
	if c == nil {
		return nil, errors.New("no connection to envd")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/envs", nil)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /envs answered %s", res.Status)
	}
	env := map[string]string{}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil {
		return nil, fmt.Errorf("GET /envs: %w", err)
	}
	return env, nil
}

// reboot cold-boots a sandbox paused without memory on its kept files: a new init and envd,
// told the sandbox's token and environment, then the template's start command and ready
// check. Caller holds e.mu.
func (o *Orchestrator) reboot(ctx context.Context, e *entry, tmpl *template.Template) error {
	fk, err := o.filesKeeper()
	if err != nil {
		return err
	}
	if _, err := fk.KeptFiles(e.sb.ID); err != nil {
		return err
	}
	env, err := o.bootEnvOf(e)
	if err != nil {
		return err
	}
	spec := runtime.Spec{
		Engine: runtime.Engine(e.sb.Runtime),
		ID:     e.sb.ID, Rootfs: tmpl.Rootfs, Layers: tmpl.LayerDirs, Args: o.envdCommand(e.sb),
		Limits: runtime.Limits{DiskBytes: int64(e.sb.DiskSizeMB) << 20},
		Start:  true, Reboot: true,
	}
	rsb, err := o.cfg.Runtime.Create(ctx, spec)
	if err != nil {
		return err
	}
	e.boots++
	o.drain(ctx, e, rsb, CreateRequest{})
	o.watchOOM(ctx, e)
	o.watchInit(e)
	if e.envd == nil {
		e.envd = o.envdClient(e.sb.ID)
	}
	if err := waitHealthy(ctx, e.envd, 10*time.Second); err != nil {
		return fmt.Errorf("envd did not come up after the reboot: %w", err)
	}
	init := templateInit(tmpl, env)
	init.CollectOutput = o.collectOutput(e.sb, nil, tmpl.CollectLogs)
	if e.sb.EnvdAccessToken != "" {
		init.AccessToken = &e.sb.EnvdAccessToken
	}
	if err := postInit(ctx, e.envd, init); err != nil {
		return fmt.Errorf("init envd after the reboot: %w", err)
	}
	if tmpl.StartCmd != "" || tmpl.ReadyCmd != "" {
		if err := startTemplateCmd(ctx, e.envd, e.sb.EnvdAccessToken, deref(init.DefaultUser), deref(init.DefaultWorkdir), tmpl.StartCmd, tmpl.ReadyCmd); err != nil {
			return fmt.Errorf("template %s after the reboot: %w", tmpl.Name, err)
		}
	}
	o.dropBootEnv(ctx, e)
	return nil
}

// adoptKept takes over a sandbox an earlier server paused without memory: nothing runs, its
// files wait for a resume, which reboots it.
func (o *Orchestrator) adoptKept(ctx context.Context, sb *store.Sandbox, begun time.Time) error {
	fk, err := o.filesKeeper()
	if err != nil {
		return fmt.Errorf("the server restarted and %w", err)
	}
	kept, err := fk.KeptFiles(sb.ID)
	if err != nil {
		return fmt.Errorf("it was paused without memory and its files are gone: %w", err)
	}
	e := &entry{sb: sb, closers: map[*closer]struct{}{}, adopted: true}
	if _, err := o.reclaimNetwork(ctx, e); err != nil {
		return fmt.Errorf("the server restarted and could not give its kept files their network back: %w", err)
	}
	adopted := []any{telemetry.KeyState, string(sb.State), telemetry.KeyPauseKind, reason.PauseFilesystem.String(),
		telemetry.KeySnapshotBytes, kept.Bytes, telemetry.KeyEndAt, sb.EndAt.UTC()} // read before the evictor may kill it
	o.mu.Lock()
	o.live[sb.ID] = e
	o.mu.Unlock()
	o.nudge()
	o.logger(ctx).Info("sandbox adopted", append(adopted, telemetry.KeyDurationMS, float64(time.Since(begun).Microseconds())/1000)...)
	return nil
}
