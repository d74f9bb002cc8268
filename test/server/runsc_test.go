package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestRunscSDKScenarios runs the npm SDK's server scenarios against a server whose sandboxes
// run on gVisor (--runtime runsc), and checks that gVisor, not the host's kernel, answers
// inside them. test/e2e runs the same file on runc; the other scenario files run on both
// runtimes in the tests that own them (covetest.EachRuntime).
func TestRunscSDKScenarios(t *testing.T) {
	covetest.Runsc(t)
	t.Setenv(covetest.RuntimeEnv, "runsc") // for the scenario file too
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--runtime", "runsc"}})
	ctx := context.Background()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Run("gVisor answers the kernel's questions", func(t *testing.T) {
		sb, err := c.Create(ctx, cove.SandboxOptions{})
		if err != nil {
			t.Fatalf("create on runsc: %v\n%s", err, s.Logs())
		}
		defer sb.Kill(ctx)
		res, err := sb.Commands.Run(ctx, "uname -r; cat /proc/version")
		if err != nil {
			t.Fatal(err)
		}
		host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		if strings.Contains(res.Stdout, strings.TrimSpace(string(host))) || !strings.Contains(strings.ToLower(res.Stdout), "gvisor") {
			t.Fatalf("inside a runsc sandbox the kernel says %q; the host's is %q", res.Stdout, host)
		}
	})
	t.Run("the npm SDK's server scenarios", func(t *testing.T) {
		covetest.RunSDKScenarios(t, "server.test.mjs", s.URL, s.Key)
	})
}

// TestRunscPerTemplate: on a server whose default is runc, a template that requires runsc
// starts its sandboxes on gVisor, and says so (GET /sandboxes/{id}, the template, cove
// explain), while base's stay on runc; an unknown runtime is refused, naming the field.
func TestRunscPerTemplate(t *testing.T) {
	covetest.Runsc(t)
	// A store of its own: the template it builds stays out of the shared one.
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t)})
	ctx := context.Background()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := c.BuildTemplate(ctx, "on-gvisor", cove.TemplateDefinition{FromTemplate: "base",
		Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo built > /tmp/built"}}}}, cove.TemplateBuildOptions{Runtime: "runsc"}); err != nil {
		t.Fatalf("build a runsc template: %v\n%s", err, s.Logs())
	}
	if info, err := c.Template(ctx, "on-gvisor"); err != nil || info.Runtime != "runsc" {
		t.Fatalf("the template says runtime %+v (%v), want runsc", info, err)
	}
	gv, err := c.Create(ctx, cove.SandboxOptions{Template: "on-gvisor"})
	if err != nil {
		t.Fatalf("create from the runsc template: %v\n%s", err, s.Logs())
	}
	defer gv.Kill(ctx)
	plain, err := c.Create(ctx, cove.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Kill(ctx)
	for sb, want := range map[*cove.Sandbox]string{gv: "runsc", plain: "runc"} {
		info, err := c.Info(ctx, sb.ID)
		if err != nil || info.Runtime != want {
			t.Errorf("%s says runtime %q (%v), want %s", sb.ID, info.Runtime, err, want)
		}
		res, err := sb.Commands.Run(ctx, "uname -r")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(res.Stdout, "gvisor"); got != (want == "runsc") {
			t.Errorf("%s (%s) runs on a kernel that says %q", sb.ID, want, res.Stdout)
		}
		out, err := exec.Command(covetest.Binary(t), "explain", sb.ID, "--api-url", s.URL, "--api-key", s.Key).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "runtime "+want) {
			t.Errorf("cove explain %s: %v\n%s", sb.ID, err, out)
		}
	}
	t.Run("a paused runsc sandbox resumes with its files", func(t *testing.T) {
		if _, err := gv.Commands.Run(ctx, "echo kept > /tmp/kept"); err != nil {
			t.Fatal(err)
		}
		if err := c.Pause(ctx, gv.ID); err != nil {
			t.Fatalf("pause a runsc sandbox: %v", err)
		}
		back, err := c.Connect(ctx, gv.ID, 0)
		if err != nil {
			t.Fatalf("resume a runsc sandbox: %v", err)
		}
		if res, err := back.Commands.Run(ctx, "cat /tmp/kept /tmp/built"); err != nil || res.Stdout != "kept\nbuilt\n" {
			t.Fatalf("after the resume: %+v %v", res, err)
		}
	})
	t.Run("an unknown runtime is refused, naming the field", func(t *testing.T) {
		_, err := c.BuildTemplate(ctx, "on-nothing", cove.TemplateDefinition{FromTemplate: "base"}, cove.TemplateBuildOptions{Runtime: "firecracker"})
		if err == nil || !strings.Contains(err.Error(), "runtime") || !strings.Contains(err.Error(), "firecracker") {
			t.Fatalf("a template for runtime firecracker: %v", err)
		}
	})
}
