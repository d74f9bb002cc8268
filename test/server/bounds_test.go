package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestBoundsATenantCannotExceed runs a server with small bounds and shows each answers as a
// clear refusal: volume mounts over the sandbox's own paths or a template's file are 400s
// naming volumeMounts, a volume the host cannot hold is a 507 and one past the team's count
// a 429, a build step past its time
// limit is killed saying why, and build steps count against the team's sandbox quota.
func TestBoundsATenantCannotExceed(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t),
		Args: []string{"--volume-size-mb", "8", "--build-step-timeout", "3s", "--build-timeout", "12s", "--quota-sandboxes", "2",
			"--quota-volumes", "2", "--quota-volume-mb", "0"}})
	a := client{t: t, url: s.URL, key: s.Key}
	code, out, _ := a.do(http.MethodPost, "/volumes", map[string]any{"name": "bounds"})
	if code != http.StatusCreated {
		t.Fatalf("create volume: %d %v", code, out)
	}
	vol := out["volumeID"].(string)
	t.Cleanup(func() { a.do(http.MethodDelete, "/volumes/"+vol, nil) })

	for _, path := range []string{"/proc/self", "/dev", "/dev/pts", "/sys", "/run", "/etc/passwd", "/etc/passwd/x"} {
		t.Run("a volume mounted at "+path+" is a 400 naming volumeMounts and no host path", func(t *testing.T) {
			code, body, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base",
				"volumeMounts": []map[string]any{{"name": "bounds", "path": path}}})
			msg, _ := body["message"].(string)
			if code != http.StatusBadRequest || !strings.Contains(msg, "volumeMounts") || strings.Contains(msg, s.DataDir) {
				t.Errorf("%d %v", code, body)
			}
		})
	}
	t.Run("a volume larger than the host's free disk is a 507 naming sizeMB", func(t *testing.T) {
		code, body, _ := a.do(http.MethodPost, "/volumes", map[string]any{"name": "huge", "sizeMB": 1 << 20})
		msg, _ := body["message"].(string)
		if code != http.StatusInsufficientStorage || !strings.Contains(msg, "sizeMB") {
			t.Errorf("%d %v", code, body)
		}
	})

	t.Run("a volume past the team's count is a 429 naming the quota", func(t *testing.T) {
		code, out, _ := a.do(http.MethodPost, "/volumes", map[string]any{"name": "second"})
		if code != http.StatusCreated {
			t.Fatalf("the team's second volume: %d %v", code, out)
		}
		t.Cleanup(func() { a.do(http.MethodDelete, "/volumes/"+out["volumeID"].(string), nil) })
		code, body, _ := a.do(http.MethodPost, "/volumes", map[string]any{"name": "third"})
		msg, _ := body["message"].(string)
		if code != http.StatusTooManyRequests || !strings.Contains(msg, "volume quota") {
			t.Errorf("%d %v", code, body)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	t.Run("a build step past the step time limit is killed, and the build fails saying so", func(t *testing.T) {
		begun := time.Now()
		_, err := client.BuildTemplate(ctx, "bounds-slow", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo sleeping; sleep 600"}}}}, cove.TemplateBuildOptions{})
		var be *cove.BuildError
		if !errors.As(err, &be) || !strings.Contains(be.Message, "time limit") || strings.Contains(be.Message, s.DataDir) {
			t.Fatalf("build: %v; want a BuildError naming the time limit and no host path", err)
		}
		t.Logf("the build failed after %s: %q", time.Since(begun).Round(time.Millisecond), be.Message)
	})
	t.Run("a build whose steps each keep to the step limit is killed at the build's limit", func(t *testing.T) {
		var steps []cove.TemplateStep
		for i := range 10 {
			steps = append(steps, cove.TemplateStep{Type: "RUN", Args: []string{fmt.Sprintf("echo step %d; sleep 2", i)}})
		}
		begun := time.Now()
		_, err := client.BuildTemplate(ctx, "bounds-long", cove.TemplateDefinition{FromTemplate: "base", Steps: steps}, cove.TemplateBuildOptions{})
		var be *cove.BuildError
		if !errors.As(err, &be) || !strings.Contains(be.Message, "build time limit of 12s") || strings.Contains(be.Message, s.DataDir) {
			t.Fatalf("build: %v; want a BuildError naming the build time limit and no host path", err)
		}
		t.Logf("the build failed after %s: %q", time.Since(begun).Round(time.Millisecond), be.Message)
	})
	t.Run("a build step beyond the team's sandbox quota fails naming the quota", func(t *testing.T) {
		for range 2 {
			id := a.create(nil)
			t.Cleanup(func() { a.do(http.MethodDelete, "/sandboxes/"+id, nil) })
		}
		_, err := client.BuildTemplate(ctx, "bounds-quota", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo over-quota"}}}}, cove.TemplateBuildOptions{})
		var be *cove.BuildError
		if !errors.As(err, &be) || !strings.Contains(be.Message, "concurrent sandboxes") {
			t.Fatalf("build: %v; want a BuildError naming the sandbox quota", err)
		}
	})
	t.Run("a create past the team's quota is a 429", func(t *testing.T) {
		for range 2 {
			id := a.create(nil)
			t.Cleanup(func() { a.do(http.MethodDelete, "/sandboxes/"+id, nil) })
		}
		if code, body, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base"}); code != http.StatusTooManyRequests {
			t.Errorf("a third sandbox under a quota of 2: %d %v", code, body)
		}
	})
	t.Run("each bound the team hit is a team.limit.reached event, once, saying what was refused", func(t *testing.T) {
		evs, err := client.Events(ctx, "", cove.EventOptions{Types: []string{cove.EventLimitReached}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, e := range evs {
			d, err := e.Data()
			lr, ok := d.(*cove.LimitReachedEventData)
			if err != nil || !ok || lr.Detail == "" || strings.Contains(lr.Detail, s.DataDir) {
				t.Errorf("event %+v: data %+v %v", e, d, err)
				continue
			}
			got[lr.Limit]++
		}
		for _, want := range []string{cove.LimitHostVolumes, cove.LimitTeamVolumes, cove.LimitBuildStepTime, cove.LimitBuildTime, cove.LimitTeamSandboxes} {
			if got[want] != 1 {
				t.Errorf("%d %s events, want 1 (all: %v)", got[want], want, got)
			}
		}
	})
}

// TestASandboxesFilesAndForksAreBounded runs what a tenant would to exhaust the host in a
// real sandbox: a loop of eventfds stops at the open-file limit, root cannot raise it, the
// host's kernel command line, block devices and overlay paths are out of sight, and a
// fork-bombed sandbox is killed and leaves no cgroup.
func TestASandboxesFilesAndForksAreBounded(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t)})
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, cove.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })
	run := func(t *testing.T, cmd string) string {
		t.Helper()
		res, err := sb.Commands.Run(ctx, cmd, cove.User("root"))
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	t.Run("a loop of eventfds stops at the open-file limit", func(t *testing.T) {
		out := run(t, `python3 -c '
import os
n = 0
try:
    while True:
        os.eventfd(0)
        n += 1
except OSError as e:
    print(n, e.errno)'`)
		var n, errno int
		if _, err := fmt.Sscan(out, &n, &errno); err != nil || errno != 24 || n < 1000 || n > 2048 {
			t.Errorf("opened %q (count, errno); want EMFILE (24) below 2048", out)
		}
	})
	t.Run("root in the sandbox cannot raise the limit", func(t *testing.T) {
		if out := run(t, "ulimit -Hn 100000 2>/dev/null && echo raised || echo refused"); out != "refused" {
			t.Errorf("ulimit -Hn: %s", out)
		}
	})
	t.Run("the host's kernel command line, block devices and overlay paths are out of sight", func(t *testing.T) {
		out := run(t, "wc -c < /proc/cmdline; ls /sys/block | wc -l; grep -c 'upperdir=/[^p]' /proc/self/mountinfo || true")
		if strings.Fields(out)[0] != "0" || strings.Fields(out)[1] != "0" || strings.Fields(out)[2] != "0" {
			t.Errorf("cmdline bytes, block devices, overlay mounts naming host paths: %q", out)
		}
	})
	t.Run("no mount names a path of the host's: envd's binary, resolv.conf, the CA bundle", func(t *testing.T) {
		if _, err := os.Stat("/dev/shm"); err != nil {
			t.Skip("no /dev/shm tmpfs: the binds keep their host paths")
		}
		mounts := run(t, "cat /proc/self/mountinfo")
		for _, host := range []string{s.DataDir, filepath.Dir(covetest.Binary(t)), "/run/cove", "/usr/local/bin", "/tmp/"} {
			if strings.Contains(mounts, host) {
				t.Errorf("mountinfo names %s:\n%s", host, mounts)
			}
		}
		for _, target := range []string{" /.cove/cove ", " /etc/resolv.conf ", " /etc/ssl/certs/ca-certificates.crt "} {
			if !strings.Contains(mounts, target) {
				t.Errorf("no mount at%s:\n%s", target, mounts)
			}
		}
	})
	t.Run("a fork-bombed sandbox is killed and leaves no cgroup", func(t *testing.T) {
		if _, err := sb.Commands.Start(ctx, "bomb() { bomb | bomb & }; bomb", cove.User("root")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the bomb fills the sandbox's pids
		begun := time.Now()
		switch err := sb.Kill(ctx); {
		case err != nil && strings.Contains(err.Error(), "was killed: envd_exited"):
			// The bomb took envd down first (its Go runtime could not start a thread at the
			// pids limit): the sandbox was killed for it, which is the bound holding too.
			t.Logf("the bomb ended envd, and the sandbox with it: %v", err)
		case err != nil:
			t.Fatal(err)
		default:
			t.Logf("killing the fork-bombed sandbox took %s", time.Since(begun).Round(time.Millisecond))
		}
		if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/cove/" + sb.ID); len(dirs) > 0 {
			t.Errorf("cgroups left: %v", dirs)
		}
	})
}
