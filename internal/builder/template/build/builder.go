package build

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"golang.org/x/sys/unix"
)

// StepError is a build step that failed: which one (1-based) and why.
type StepError struct {
	Index int
	Step  template.Step
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %d (%s): %v", e.Index, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// buildSteps builds t's layers on spec.From: each step reuses its cached layer or makes it.
func (s *Builder) buildSteps(ctx context.Context, spec Spec, t *template.Template, out *lineWriter) error {
	parent, err := s.Lookup(spec.From)
	if err != nil {
		return fmt.Errorf("from: %w", err)
	}
	hold, err := s.HoldLayers()
	if err != nil {
		return err
	}
	defer hold()
	t.Root, t.Layers = parent.Name, nil
	below := rootIdentity(parent)
	c := buildContext{Env: maps.Clone(parent.Env), User: parent.User, Workdir: parent.Workdir, Scope: spec.Scope}
	if parent.Root != "" {
		t.Root, t.Layers = parent.Root, append([]string(nil), parent.Layers...)
		if len(t.Layers) > 0 {
			below = t.Layers[len(t.Layers)-1]
		}
		t.StartCmd, t.ReadyCmd, t.CPUCount, t.MemoryMB = parent.StartCmd, parent.ReadyCmd, parent.CPUCount, parent.MemoryMB
		t.Runtime = parent.Runtime
	}
	if c.Env == nil {
		c.Env = map[string]string{}
	}
	if parent.Root == "" && parent.Image == "" {
		// As in E2B, steps on a base run as its user, in its home, unless they say otherwise.
		if _, _, _, err := lookupUser(parent.Rootfs, template.UserName); err == nil {
			c.User, c.Workdir = template.UserName, template.UserHome
		}
	}
	root, err := s.Lookup(t.Root)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	out.Printf("==> from %s (root %s, %d layers)", spec.From, t.Root, len(t.Layers))

	steps := make([]template.Step, 0, len(spec.Run)+len(spec.Steps))
	for _, r := range spec.Run {
		steps = append(steps, template.Step{Kind: template.StepRun, Args: []string{r, "root"}})
	}
	steps = append(steps, spec.Steps...)
	force := spec.Force
	for i, st := range steps {
		n := strconv.Itoa(i + 1)
		out.startStep(n)
		begun := time.Now()
		st.Force = st.Force || force
		force = st.Force // a rebuilt layer changes every key above it
		res := template.StepResult{Step: st.String()}
		switch st.Kind {
		case template.StepEnv:
			for j := 0; j+1 < len(st.Args); j += 2 {
				c.Env[st.Args[j]] = st.Args[j+1]
			}
			out.Printf("==> [%d/%d] %s", i+1, len(steps), st)
		case template.StepUser:
			c.User = st.Args[0]
			out.Printf("==> [%d/%d] %s", i+1, len(steps), st)
		default:
			if st.Kind == template.StepWorkdir {
				c.Workdir = path.Clean("/" + st.Args[0])
			}
			if len(t.Layers) >= maxLayers {
				return &StepError{Index: i + 1, Step: st, Err: fmt.Errorf("%w: more than %d layers", template.ErrInvalid, maxLayers)}
			}
			key := layerKey(below, st, c)
			lowers := []string{root.Rootfs}
			for _, k := range t.Layers {
				lowers = append([]string{s.LayerDiff(k)}, lowers...)
			}
			out.Printf("==> [%d/%d] %s", i+1, len(steps), st)
			var disk int64 // RUN steps write into a disk of the build's size; COPY's are the uploads'
			if st.Kind == template.StepRun {
				disk = spec.Limits.DiskBytes
			}
			cached, err := s.buildLayer(ctx, key, below, st.String(), lowers, stepDisk{size: disk, images: spec.DiskImages}, s.stepFunc(st, c, spec, out))
			if err != nil {
				return &StepError{Index: i + 1, Step: st, Err: err}
			}
			if cached {
				out.Printf("    cached: layer %s", key[:12])
			}
			res.Layer, res.Cached = key, cached
			t.Layers = append(t.Layers, key)
			below = key
		}
		res.Seconds = time.Since(begun).Seconds()
		t.Built = append(t.Built, res)
	}
	out.startStep("finalize")
	t.Steps = append(append([]template.Step(nil), parent.Steps...), steps...)
	t.Env, t.User, t.Workdir = c.Env, c.User, c.Workdir
	if len(t.Env) == 0 {
		t.Env = nil
	}
	if spec.StartCmd != "" || spec.ReadyCmd != "" {
		t.StartCmd, t.ReadyCmd = spec.StartCmd, spec.ReadyCmd
	}
	if spec.CPUCount > 0 {
		t.CPUCount = spec.CPUCount
	}
	if spec.MemoryMB > 0 {
		t.MemoryMB = spec.MemoryMB
	}
	if spec.Runtime != "" {
		t.Runtime = spec.Runtime
	}
	for _, k := range t.Layers {
		if l, err := s.ReadLayer(k); err == nil {
			t.SizeBytes += l.SizeBytes
		}
	}
	return nil
}

// stepFunc is what a RUN, COPY or WORKDIR step does to the merged view of its layer.
func (s *Builder) stepFunc(st template.Step, c buildContext, spec Spec, out *lineWriter) stepRun {
	files, limits := spec.Files, spec.Limits
	// A sandbox's pids (512), not more: each process may hold runtime.DefaultNoFile open files,
	// and pids × files is what bounds a step's share of the host's open files.
	limits.PIDs = cmp.Or(limits.PIDs, 512)
	limits.MemoryBytes = cmp.Or(limits.MemoryBytes, int64(spec.MemoryMB)<<20)
	limits.CPUs = cmp.Or(limits.CPUs, float64(spec.CPUCount))
	env := make([]string, 0, len(c.Env))
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return func(ctx context.Context, merged string) error {
		switch st.Kind {
		case template.StepRun:
			user := c.User
			if len(st.Args) > 1 && st.Args[1] != "" {
				user = st.Args[1]
			}
			uid, gid, home, err := lookupUser(merged, user)
			if err != nil {
				return err
			}
			cwd := c.Workdir
			if cwd == "" {
				cwd = "/"
			}
			if err := mkdirOwned(merged, cwd, uid, gid); err != nil {
				return err
			}
			return s.runStep(ctx, merged, shellCmd{Cmd: st.Args[0], UID: uint32(uid), GID: uint32(gid), Home: home, Cwd: cwd, Env: env, Limits: limits, Network: spec.Network,
				Build: BuildStep{BuildID: spec.BuildID, TeamID: spec.TeamID, Template: spec.Name}}, out)
		case template.StepWorkdir:
			uid, gid, _, err := lookupUser(merged, c.User)
			if err != nil {
				return err
			}
			return mkdirOwned(merged, c.Workdir, uid, gid)
		case template.StepCopy:
			if files == nil {
				return fmt.Errorf("%w: COPY needs uploaded files, and this build has none", template.ErrInvalid)
			}
			owner := ""
			if len(st.Args) > 2 {
				owner = st.Args[2]
			}
			uid, gid, _, err := lookupUser(merged, owner)
			if err != nil {
				return err
			}
			var mode uint32
			if len(st.Args) > 3 && st.Args[3] != "" {
				mode, _ = template.ParseMode(st.Args[3])
			}
			rc, err := files.OpenFiles(st.FilesHash)
			if err != nil {
				return err
			}
			defer rc.Close()
			r, err := os.OpenRoot(merged)
			if err != nil {
				return err
			}
			defer r.Close()
			dest := st.Args[1]
			if !path.IsAbs(dest) { // relative to the workdir, keeping a trailing "/"
				trailing := strings.HasSuffix(dest, "/")
				dest = path.Join(orRoot(c.Workdir), dest)
				if trailing {
					dest += "/"
				}
			}
			n, err := copyFiles(r, rc, st.Args[0], dest, uid, gid, mode)
			if err != nil {
				return err
			}
			out.Printf("    copied %d entries to %s", n, dest)
			return nil
		}
		return fmt.Errorf("%w: step %s makes no layer", template.ErrInvalid, st.Kind)
	}
}

func orRoot(dir string) string {
	if dir == "" {
		return "/"
	}
	return dir
}

// mkdirOwned creates dir (absolute, inside merged) and its missing parents, owned by uid:gid.
func mkdirOwned(merged, dir string, uid, gid int) error {
	r, err := os.OpenRoot(merged)
	if err != nil {
		return err
	}
	defer r.Close()
	rel := path.Clean("/" + dir)[1:]
	if rel == "" {
		return nil
	}
	return mkdirAllRoot(r, rel, uid, gid)
}

// lockName serialises builds of one name, across processes: a flock on <store>/.lock-<name>,
// waited for until ctx ends.
func (s *Builder) lockName(ctx context.Context, name string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(s.Dir(), ".lock-"+name), os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another build of %s: %w", name, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
