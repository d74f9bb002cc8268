package template_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestBuildsRunUnderTheTeamsRules builds templates whose RUN steps reach hosts of a fake
// internet, on a server whose teams' egress allows one host and denies everything else, and
// whose teams may use at most 2 vCPUs and 768 MB: the steps get the team's network (not the
// host's) and the build's memory limit, and a build over the team's limits is refused.
func TestBuildsRunUnderTheTeamsRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server: skipped under -short")
	}
	covetest.Skip(t)
	in := nettest.New(t)
	off := false
	quotas := orchestrator.Quotas{Default: orchestrator.Quota{VCPUs: 2, MemoryMB: 768,
		Egress: &orchestrator.Egress{AllowInternetAccess: &off, AllowOut: []string{in.Addr.String()}}}}
	b, _ := json.Marshal(quotas)
	file := filepath.Join(t.TempDir(), "quotas.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	store := covetest.OwnTemplates(t)
	server := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: store, Args: []string{"--quotas", file, "--disk-size-mb", "64"}})
	client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	build := func(name, cmd string, memoryMB int) (string, error) {
		var lines []string
		_, err := client.BuildTemplate(ctx, name, cove.TemplateDefinition{FromTemplate: "base", Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{cmd}}}},
			cove.TemplateBuildOptions{MemoryMB: memoryMB, OnLog: func(e cove.BuildLogEntry) { lines = append(lines, e.Message) }})
		return strings.Join(lines, "\n"), err
	}
	curl := func(addr string) string {
		return fmt.Sprintf("curl -sS -o /dev/null -w 'status=%%{http_code}\\n' --max-time 5 http://%s/", addr)
	}
	t.Run("a step reaches a host the team's egress allows", func(t *testing.T) {
		log, err := build("allowed", curl(in.Addr.String()), 0)
		if err != nil || !strings.Contains(log, "status=200") {
			t.Fatalf("build: %v\n%s", err, log)
		}
		want := fmt.Sprintf("==> steps run in a sandbox: 2 CPUs, 512 MB, 64 MB of disk per step, the team's network: internet false, allow out [%s/32]", in.Addr)
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say where the steps ran (%q):\n%s", want, log)
		}
	})
	t.Run("a step reaching a host the team's egress denies fails the build and says which rule refused it", func(t *testing.T) {
		log, err := build("denied", curl(in.Other.String()), 0)
		var be *cove.BuildError
		if !errors.As(err, &be) || !strings.Contains(be.Message, "exit status") || strings.Contains(log, "status=200") {
			t.Fatalf("err = %v, want a failed step\n%s", err, log)
		}
		refused := fmt.Sprintf("to %s:80/tcp denied by allowInternetAccess false", in.Other)
		if !strings.Contains(log, "==> network: ") || !strings.Contains(log, refused) {
			t.Errorf("the build log does not say the network refused %q:\n%s", refused, log)
		}
		if !strings.Contains(be.Message, refused) {
			t.Errorf("the failure's last lines do not say the network refused %q: %s", refused, be.Message)
		}
		evs, err := client.Events(ctx, be.BuildID, cove.EventOptions{Types: []string{cove.EventSandboxNetworkDenied}})
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, e := range evs {
			d, err := e.Data()
			if err != nil {
				t.Fatal(err)
			}
			dd := d.(*cove.NetworkDeniedEventData)
			if found = append(found, dd.BuildID+": "+dd.String()); dd.BuildID == be.BuildID && dd.Destination == in.Other.String() {
				return
			}
		}
		t.Errorf("no network.denied event names build %s and %s: %q", be.BuildID, in.Other, found)
	})
	t.Run("a step does not run in the host's network", func(t *testing.T) {
		log, err := build("netns", "cat /proc/net/dev", 0)
		hostLinks, _ := os.ReadFile("/proc/net/dev")
		if err != nil || !strings.Contains(log, "lo:") || strings.Contains(log, in.Link+":") || !strings.Contains(string(hostLinks), in.Link+":") {
			t.Fatalf("build: %v; the step's links:\n%s", err, log)
		}
	})
	t.Run("a step runs with the build's memory limit", func(t *testing.T) {
		log, err := build("limits", "echo mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)", 640)
		if err != nil || !strings.Contains(log, fmt.Sprintf("mem=%d", 640<<20)) {
			t.Fatalf("build: %v\n%s", err, log)
		}
	})
	t.Run("a step writing past the build's disk fails the build with ENOSPC and leaves nothing on the host", func(t *testing.T) {
		log, err := build("too-much", "dd if=/dev/zero of=$HOME/fill bs=1M count=100", 0)
		var be *cove.BuildError
		if !errors.As(err, &be) || !strings.Contains(be.Message, "No space left on device") || !strings.Contains(be.Message, "ENOSPC: the step filled the build's disk (64 MB)") {
			t.Fatalf("err = %v, want a failed step that says it ran out of disk\n%s", err, log)
		}
		left, _ := filepath.Glob(filepath.Join(store, ".layers", ".build-*"))
		images, _ := filepath.Glob(filepath.Join(store, ".layers", ".disk-*"))
		if len(left)+len(images) > 0 {
			t.Errorf("the failed step left %q in the template store (which servers may share)", append(left, images...))
		}
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range loops {
			if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), store) {
				t.Errorf("a loop device still holds %s", b)
			}
		}
	})
	t.Run("a step writing within the build's disk keeps its files and deletions for the next steps", func(t *testing.T) {
		var lines []string
		_, err := client.BuildTemplate(ctx, "within", cove.TemplateDefinition{FromTemplate: "base", Steps: []cove.TemplateStep{
			{Type: "RUN", Args: []string{"dd if=/dev/zero of=/opt/ten bs=1M count=10 && rm /etc/issue && mkdir -p /opt/d && touch /opt/d/x", "root"}},
			{Type: "RUN", Args: []string{"test $(stat -c %s /opt/ten) = 10485760 && ! test -e /etc/issue && test -f /opt/d/x && echo kept"}},
		}}, cove.TemplateBuildOptions{OnLog: func(e cove.BuildLogEntry) { lines = append(lines, e.Message) }})
		if log := strings.Join(lines, "\n"); err != nil || !strings.Contains(log, "kept") {
			t.Fatalf("build: %v\n%s", err, log)
		}
	})
	t.Run("a build asking for more memory than the team may use is refused", func(t *testing.T) {
		_, err := build("too-big", "true", 4096)
		var ce *cove.Error
		if !errors.As(err, &ce) || ce.StatusCode != 400 || !strings.Contains(err.Error(), "memoryMB 4096 is over the team's limit of 768") {
			t.Fatalf("err = %v, want a 400 naming memoryMB", err)
		}
	})
}
