package server

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

func TestRootInTheSandboxCannotReadEnvdsMemoryOrEnvironment(t *testing.T) {
	s := covetest.Start(t, "")
	id := client{t: t, url: s.URL, key: s.Key}.create(nil)
	c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh",
		Args: []string{"-c", "id -u; cat /proc/1/environ >/dev/null && echo readable || echo refused"}}})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for stream.Receive() {
		if d := stream.Msg().GetEvent().GetData(); d != nil {
			out.Write(d.GetStdout())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out.String())
	if len(got) != 2 || got[0] != "0" {
		t.Fatalf("output %q, want root's uid and a verdict", out.String())
	}
	if got[1] != "refused" {
		t.Errorf("root in the sandbox read envd's /proc/1/environ: envd is dumpable")
	}
}
