// Command startsnap benchmarks creating sandboxes from a template with a start command:
// restored from the template's start snapshot (the command ran once, at build, and passed
// its ready check) against starting the command and waiting for the ready check at every
// create (what a server without checkpoints does). It prints both and their ratio,
// measured in one run:
//
//	go run ./bench/startsnap            # needs root, runc, CRIU 4 and the shared base template
//	go run ./bench/startsnap -creates 40
//
// Two `cove server`s run side by side on template stores of their own (whose base is the
// shared test base, a symlink, never written to): one can checkpoint; the other runs with a
// PATH without CRIU, so it builds the same template without a snapshot. Creates alternate
// between the two, so the machine's noise falls on both alike. Each create is timed from the
// call until it returns (for the cold path that includes the ready check), then one request
// to the served port checks it answers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// The start commands serve a port with Python, at once or after a warm-up of 2 s (what an
// app that loads its code or data before it listens costs); the ready check is the npm
// SDK's waitForPort.
var templates = []struct{ name, what, startCmd string }{
	{"served", "python3 -m http.server", `exec python3 -m http.server 8000`},
	{"warmup", "2 s warm-up, then python3 -m http.server", `sleep 2 && exec python3 -m http.server 8000`},
}

const readyCmd = `[ -n "$(ss -Htuln sport = :8000)" ]`

func main() {
	creates := flag.Int("creates", 20, "timed creates per path")
	flag.Parse()
	if err := run(*creates); err != nil {
		fmt.Fprintln(os.Stderr, "bench/startsnap:", err)
		os.Exit(1)
	}
}

func run(creates int) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (runc, overlay mounts, CRIU)")
	}
	if out, err := exec.Command("criu", "--version").Output(); err != nil || !strings.Contains(string(out), "Version: 4") {
		return fmt.Errorf("needs CRIU 4 (scripts/criu.sh builds it): criu --version: %q %v", out, err)
	}
	base := filepath.Join(covetest.TemplatesDir(), "base")
	if _, err := os.Stat(filepath.Join(base, "meta.json")); err != nil {
		return fmt.Errorf("no shared base template at %s: %w", base, err)
	}
	tmp, err := os.MkdirTemp("", "cove-bench-startsnap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := covetest.BuildBinary(tmp)
	if err != nil {
		return err
	}
	launch := func(name, path string) (*covetest.Process, error) {
		data, templates := filepath.Join(tmp, name, "data"), filepath.Join(tmp, name, "templates")
		for _, d := range []string{data, templates} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, err
			}
		}
		if err := os.Symlink(base, filepath.Join(templates, "base")); err != nil {
			return nil, err
		}
		old := os.Getenv("PATH")
		os.Setenv("PATH", path)
		defer os.Setenv("PATH", old)
		return covetest.LaunchWith(bin, data, filepath.Join(tmp, name, "server.log"), "--templates", templates, "--no-build")
	}
	snapServer, err := launch("snapshot", os.Getenv("PATH"))
	if err != nil {
		return err
	}
	defer snapServer.Stop()
	// /usr/local/sbin is where scripts/criu.sh installs criu: without it the server has no checkpoints.
	coldServer, err := launch("cold", "/usr/sbin:/usr/bin:/sbin:/bin")
	if err != nil {
		return err
	}
	defer coldServer.Stop()

	ctx := context.Background()
	snap := cove.NewClient(cove.Config{APIURL: snapServer.URL, APIKey: snapServer.Key})
	cold := cove.NewClient(cove.Config{APIURL: coldServer.URL, APIKey: coldServer.Key})
	fmt.Printf("%-62s %10s\n", "metric", "value")
	for _, tpl := range templates {
		if err := bench(ctx, snap, cold, tpl.name, tpl.what, tpl.startCmd, creates); err != nil {
			return fmt.Errorf("%s: %w", tpl.name, err)
		}
	}
	return nil
}

// bench builds the template name on both servers and times creates from each, alternating.
func bench(ctx context.Context, snap, cold *cove.Client, name, what, startCmd string, creates int) error {
	def := cove.TemplateDefinition{FromTemplate: "base", StartCmd: startCmd, ReadyCmd: readyCmd}
	for _, c := range []*cove.Client{snap, cold} {
		if _, err := c.BuildTemplate(ctx, name, def, cove.TemplateBuildOptions{}); err != nil {
			return err
		}
	}
	info, err := snap.Template(ctx, name)
	if err != nil {
		return err
	}
	if info.StartSnapshot == nil {
		return errors.New("the server with CRIU built the template without a start snapshot")
	}
	if ci, err := cold.Template(ctx, name); err != nil || ci.StartSnapshot != nil {
		return fmt.Errorf("the server without CRIU took a start snapshot (%v)", err)
	}
	createOn := func(c *cove.Client) (time.Duration, error) {
		t0 := time.Now()
		sb, err := c.Create(ctx, cove.SandboxOptions{Template: name, Timeout: time.Minute})
		if err != nil {
			return 0, err
		}
		d := time.Since(t0)
		res, err := sb.Commands.Run(ctx, `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/`)
		if err == nil && res.Stdout != "200" {
			err = fmt.Errorf("the port answered %q right after create", res.Stdout)
		}
		return d, errors.Join(err, sb.Kill(ctx))
	}
	var restored, started []time.Duration
	warm := min(measure.Warm(creates), 5) // each create is a whole sandbox: a few warm-ups do
	for i := range warm + creates {
		r, err := createOn(snap)
		if err != nil {
			return fmt.Errorf("create from the snapshot: %w", err)
		}
		s, err := createOn(cold)
		if err != nil {
			return fmt.Errorf("create with the start command: %w", err)
		}
		if i >= warm {
			restored, started = append(restored, r), append(started, s)
		}
	}
	pr, ps := measure.Pct(restored, 50), measure.Pct(started, 50)
	fmt.Printf("[%s: %s]\n", name, what)
	fmt.Printf("%-62s %8.1f MiB\n", "  start snapshot on disk", float64(info.StartSnapshot.SizeBytes)/(1<<20))
	fmt.Printf("%-62s %8d ms\n", "  ready check passed at build after", info.StartSnapshot.ReadyMS)
	fmt.Printf("%-62s %8.1f ms  (p90 %.1f)\n", "  create p50, restored from the start snapshot", measure.Ms(pr), measure.Ms(measure.Pct(restored, 90)))
	fmt.Printf("%-62s %8.1f ms  (p90 %.1f)\n", "  create p50, start command + ready check at create", measure.Ms(ps), measure.Ms(measure.Pct(started, 90)))
	fmt.Printf("%-62s %8.2f\n", "  start at create / restore (p50)", float64(ps)/float64(pr))
	return nil
}
