// Command runtimes measures runsc (gVisor) against runc through a whole `cove server`, side by
// side in one run, and prints each figure with its runsc/runc ratio: create → first command,
// a `true` round trip, stdout MiB/s, file upload MiB/s, and a 64 MB snapshot pause and resume.
// It is a measuring tool, not a test: it never fails on a figure.
//
//	go run ./bench/runtimes          # 20 rounds of each
//	go run ./bench/runtimes -n 5
//
// It needs root, the shared test templates (make test-templates) and bin/runsc
// (scripts/runsc.sh). It builds cove, starts one server (runc by default) with its own data dir
// and no sandbox network, builds a template that requires runsc, and measures a base sandbox
// (runc) and one of that template (runsc) in turns, so both see the same machine.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
	"github.com/cove-dev/cove/templates"
)

func main() {
	n := flag.Int("n", 20, "rounds of each measurement")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "bench/runtimes:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "cove-bench-runtimes-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := covetest.BuildBinary(tmp)
	if err != nil {
		return err
	}
	repoBin, err := filepath.Abs("bin")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(repoBin, "runsc")); err != nil {
		return fmt.Errorf("no bin/runsc (scripts/runsc.sh builds it): %w", err)
	}
	os.Setenv("PATH", repoBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	data := filepath.Join(tmp, "data")
	templates := filepath.Join(tmp, "templates")
	if err := linkBase(bin, templates); err != nil {
		return err
	}
	addr, err := measure.FreeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "server", "--data", data, "--templates", templates, "--addr", addr, "--no-build", "--network=false",
		"--on-stop", "kill", "--sandbox-memory-mb", "1024", "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	up := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "==> Cove is up at ") {
			up = true
			break
		}
	}
	if !up {
		return fmt.Errorf("cove server did not come up")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	key, err := os.ReadFile(filepath.Join(data, "initial-api-key"))
	if err != nil {
		return err
	}
	c := cove.NewClient(cove.Config{APIURL: "http://" + addr, APIKey: strings.TrimSpace(string(key)), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := c.BuildTemplate(ctx, "gvisor", cove.TemplateDefinition{FromTemplate: "base"}, cove.TemplateBuildOptions{Runtime: "runsc"}); err != nil {
		return fmt.Errorf("build the runsc template: %w", err)
	}
	engines := []struct{ name, template string }{{"runc", "base"}, {"runsc", "gvisor"}}
	type figures struct {
		first, trueRTT, pause, resume []time.Duration
		stdout, upload                []float64 // MiB/s
	}
	got := map[string]*figures{"runc": {}, "runsc": {}}
	for i := range n {
		for _, e := range engines {
			f := got[e.name]
			begun := time.Now()
			sb, err := c.Create(ctx, cove.SandboxOptions{Template: e.template, Timeout: 10 * time.Minute})
			if err != nil {
				return fmt.Errorf("create %s: %w", e.name, err)
			}
			if _, err := sb.Commands.Run(ctx, "true"); err != nil {
				return err
			}
			f.first = append(f.first, time.Since(begun))
			for range 5 {
				t0 := time.Now()
				if _, err := sb.Commands.Run(ctx, "true"); err != nil {
					return err
				}
				f.trueRTT = append(f.trueRTT, time.Since(t0))
			}
			if i < max(3, n/4) { // the throughputs and the 64 MB pauses take longer: fewer rounds
				var bytes int64
				t0 := time.Now()
				if _, err := sb.Commands.Run(ctx, "head -c 268435456 /dev/zero", cove.OnStdout(func(s string) { bytes += int64(len(s)) })); err != nil {
					return err
				}
				f.stdout = append(f.stdout, float64(bytes)/(1<<20)/time.Since(t0).Seconds())
				payload := make([]byte, 64<<20)
				t0 = time.Now()
				if _, err := sb.Files.Write(ctx, "/tmp/upload", payload); err != nil {
					return err
				}
				f.upload = append(f.upload, 64/time.Since(t0).Seconds())
				if _, err := sb.Commands.Start(ctx, `python3 -c 'import os,time; x=bytearray(os.urandom(64<<20)); open("/tmp/ready","w").write("1"); time.sleep(100000)'`); err != nil {
					return err
				}
				if _, err := sb.Commands.Run(ctx, "for i in $(seq 600); do [ -e /tmp/ready ] && exit 0; sleep 0.05; done; exit 1"); err != nil {
					return err
				}
				t0 = time.Now()
				if err := c.PauseWith(ctx, sb.ID, cove.PauseOptions{Kind: reason.PauseSnapshot}); err != nil {
					return fmt.Errorf("pause %s: %w", e.name, err)
				}
				f.pause = append(f.pause, time.Since(t0))
				t0 = time.Now()
				if _, err := c.Connect(ctx, sb.ID, 10*time.Minute); err != nil {
					return fmt.Errorf("resume %s: %w", e.name, err)
				}
				f.resume = append(f.resume, time.Since(t0))
			}
			_ = sb.Kill(ctx)
		}
	}
	fmt.Printf("runsc (gVisor, systrap) against runc, one server, the same machine, in turns (%s)\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("%-36s %12s %12s %8s\n", "", "runc", "runsc", "ratio")
	row := func(what string, r, g []time.Duration) {
		a, b := measure.Ms(measure.Pct(r, 50)), measure.Ms(measure.Pct(g, 50))
		fmt.Printf("%-36s %9.1f ms %9.1f ms %7.2fx\n", what, a, b, b/a)
	}
	rate := func(what string, r, g []float64) {
		slices.Sort(r)
		slices.Sort(g)
		a, b := r[len(r)/2], g[len(g)/2]
		fmt.Printf("%-36s %7.0f MiB/s %7.0f MiB/s %7.2fx\n", what, a, b, b/a)
	}
	rc, gv := got["runc"], got["runsc"]
	for _, f := range []*figures{rc, gv} {
		for _, d := range [][]time.Duration{f.first, f.trueRTT, f.pause, f.resume} {
			slices.Sort(d)
		}
	}
	row("create → first command, p50", rc.first, gv.first)
	row("`true` round trip, p50", rc.trueRTT, gv.trueRTT)
	rate("stdout through envd, median", rc.stdout, gv.stdout)
	rate("file upload (64 MiB), median", rc.upload, gv.upload)
	row("snapshot pause, 64 MB touched, p50", rc.pause, gv.pause)
	row("resume of it, p50", rc.resume, gv.resume)
	return nil
}

// linkBase makes a template store holding the shared test store's base (symlinks), as
// covetest.OwnTemplates does: the runsc template built on it stays out of the shared store.
func linkBase(_, dir string) error {
	shared := covetest.TemplatesDir()
	if _, err := os.Stat(filepath.Join(shared, "base", "meta.json")); err != nil {
		return fmt.Errorf("no shared base template in %s (make test-templates builds it): %w", shared, err)
	}
	return template.Link(dir, shared, templates.BaseName)
}
