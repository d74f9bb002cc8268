package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/covetest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// TestSandboxDiskLimit runs a server whose sandboxes get a 64 MiB disk: a write past it gets
// ENOSPC inside the sandbox, an upload past it 507, and the host's disk gives the sandbox no
// more than 64 MiB.
func TestSandboxDiskLimit(t *testing.T) {
	const mb = 64
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--disk-size-mb", fmt.Sprint(mb)}})
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(nil)

	t.Run("dd past the disk size fails with ENOSPC inside the sandbox", func(t *testing.T) {
		c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
		f := false
		req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash",
			Args: []string{"-c", "dd if=/dev/zero of=/home/user/big bs=1M count=100 2>&1; echo exit=$?; rm -f /home/user/big"}}, Stdin: &f})
		req.Header().Set("E2b-Sandbox-Id", id)
		stream, err := c.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for stream.Receive() {
			out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		}
		if !strings.Contains(out.String(), "No space left on device") || strings.Contains(out.String(), "exit=0") {
			t.Errorf("dd of 100 MiB into %d MiB: %q", mb, out.String())
		}
	})
	t.Run("an upload past the disk size is 507", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/files?path=/home/user/upload.bin&username=user",
			bytes.NewReader(make([]byte, (mb+16)<<20)))
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("Content-Type", "application/octet-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusInsufficientStorage {
			t.Errorf("upload of %d MiB: %d %s, want 507", mb+16, res.StatusCode, b)
		}
	})
	t.Run("the sandbox's disk image holds at most its size on the host", func(t *testing.T) {
		var st unix.Stat_t
		img := filepath.Join(s.DataDir, "sandboxes", id, "disk.img")
		if err := unix.Stat(img, &st); err != nil {
			t.Fatalf("the sandbox has no disk image: %v", err)
		}
		if used := st.Blocks * 512; used > mb<<20 {
			t.Errorf("the image uses %d bytes of the host's disk, over %d MiB", used, mb)
		}
	})
}
