package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// A sandbox from a template rootfs, running the cove binary as envd, reached through its own
// loopback.
func ExampleRunc() {
	ctx := context.Background()
	r, err := runtime.NewRunc(ctx, runtime.Config{DataDir: "/var/lib/cove/sandboxes"})
	if err != nil {
		log.Fatal(err) // names what the machine lacks: root, runc, cgroup v1, overlayfs
	}
	sb, err := r.Create(ctx, runtime.Spec{
		ID:     "i3k2x9",
		Rootfs: "/var/lib/cove/templates/base/rootfs",
		Args:   []string{"/.cove/cove", "envd"},
		Binds:  []runtime.Bind{{Source: "/usr/local/bin/cove", Target: "/.cove/cove", ReadOnly: true}},
		Limits: runtime.Limits{MemoryBytes: 512 << 20, CPUs: 2, PIDs: 1024},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Destroy(ctx, sb.ID)
	go io.Copy(io.Discard, sb.Stdout) // Cove tags and stores these lines
	go io.Copy(io.Discard, sb.Stderr)
	if err := r.Start(ctx, sb.ID); err != nil {
		log.Fatal(err)
	}
	conn, err := r.Dial(ctx, sb.ID, "tcp", "127.0.0.1:49983")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: envd\r\n\r\n")
}
