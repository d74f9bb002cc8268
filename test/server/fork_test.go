package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestAForkHasItsParentsSize forks, through the Go SDK, a sandbox of a template sized apart
// from the server's default (2 vCPUs, 512 MiB): the copy reports its parent's size, and the
// kernel holds it to its parent's memory limit, not the server's default.
func TestAForkHasItsParentsSize(t *testing.T) {
	s := covetest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	name := fmt.Sprintf("sized-%d", time.Now().UnixNano()%1e9)
	if _, err := c.BuildTemplate(ctx, name, cove.TemplateDefinition{FromTemplate: "base",
		Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo sized > /tmp/cove-sized"}}}}, cove.TemplateBuildOptions{CPUCount: 1, MemoryMB: 384}); err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteTemplate(context.Background(), name) })
	parent, err := c.Create(ctx, cove.SandboxOptions{Template: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Kill(context.Background()) })
	res, err := parent.Fork(ctx, cove.ForkOptions{Count: 1})
	if err == nil && len(res) == 1 {
		err = res[0].Err
	}
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	copied := res[0].Sandbox
	t.Cleanup(func() { _ = copied.Kill(context.Background()) })

	for _, sb := range []*cove.Sandbox{parent, copied} {
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.CPUCount != 1 || info.MemoryMB != 384 {
			t.Errorf("sandbox %s reports %d vCPUs and %d MiB; want its template's 1 and 384", sb.ID, info.CPUCount, info.MemoryMB)
		}
		limit := filepath.Join("/sys/fs/cgroup/memory/cove", sb.ID, "memory.limit_in_bytes")
		if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
			t.Logf("no cgroup v1 memory hierarchy: %s's limit is not read", sb.ID)
			continue
		}
		b, err := os.ReadFile(limit)
		if err != nil {
			t.Fatalf("the memory limit of %s: %v", sb.ID, err)
		}
		if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); got != 384<<20 {
			t.Errorf("sandbox %s's memory cgroup allows %d bytes; want 384 MiB", sb.ID, got)
		}
	}
}
