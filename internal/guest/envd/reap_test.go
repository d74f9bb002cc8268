package envd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// TestMain lets the test binary run as a real envd child process (a subreaper, as PID 1 is)
// when COVE_TEST_ENVD_ADDR is set.
func TestMain(m *testing.M) {
	if addr := os.Getenv("COVE_TEST_ENVD_ADDR"); addr != "" {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "subreaper:", err)
			os.Exit(2)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		srv := envd.New(envd.Config{Logger: telemetry.NewLogger(os.Stderr, slog.LevelWarn), Reap: true})
		_ = srv.Serve(context.Background(), ln)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startReapingEnvd runs this test binary as a subreaping envd and returns its URL and pid.
func startReapingEnvd(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "COVE_TEST_ENVD_ADDR="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://" + addr
	for i := 0; ; i++ {
		res, err := http.Get(url + "/health")
		if err == nil {
			res.Body.Close()
			break
		}
		if i > 200 {
			t.Fatalf("envd child did not come up: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return url, cmd.Process.Pid
}

// children lists parent's child processes by pid, with their state letter (Z: zombie).
func children(t *testing.T, parent int) map[int]string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	out := map[int]string{}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so read after the last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == parent {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			out[pid] = fields[0]
		}
	}
	return out
}

func TestSubreaperReapsOrphansWithoutStealingExitStatuses(t *testing.T) {
	if testing.Short() {
		t.Skip("envd: reaping test starts a child envd; skipped in -short")
	}
	url, envdPID := startReapingEnvd(t)
	c := processconnect.NewProcessClient(http.DefaultClient, url)

	// Each command leaves an orphan that is re-parented to envd, then exits with its own code.
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func(code int) {
			defer wg.Done()
			f := false
			stream, err := c.Start(context.Background(), connect.NewRequest(&pb.StartRequest{
				Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", fmt.Sprintf("(sleep 0.2 >/dev/null 2>&1 &); exit %d", code)}},
				Stdin:   &f,
			}))
			if err != nil {
				errs <- err
				return
			}
			r := collect[*pb.StartResponse](stream)
			if r.err != nil || r.end == nil || int(r.end.ExitCode) != code {
				errs <- fmt.Errorf("command exiting %d: end %v err %v", code, r.end, r.err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// The orphans' sleeps end after 0.2 s; envd must reap them, leaving it no children at all.
	deadline := time.Now().Add(5 * time.Second)
	for {
		kids := children(t, envdPID)
		if len(kids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envd still has children (pid: state, Z = zombie): %v", kids)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// And orphans did exist: a fresh one shows up as envd's child before it is reaped.
	f := false
	stream, err := c.Start(context.Background(), connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "(exec -a cove-orphan sleep 1 &); true"}}, Stdin: &f}))
	if err != nil {
		t.Fatal(err)
	}
	collect[*pb.StartResponse](stream)
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(envdPID), "-f", "cove-orphan").Output()
	if strings.TrimSpace(string(out)) == "" {
		t.Error("the orphan was not re-parented to envd: the test does not exercise reaping")
	}
}

// TestInitPrefersItsCommandsForTheOOMKiller: as a sandbox's init (here a subreaper), envd
// raises each command's oom_score_adj once the start event is out, so that the OOM killer
// takes a command before envd.
func TestInitPrefersItsCommandsForTheOOMKiller(t *testing.T) {
	if testing.Short() {
		t.Skip("envd: starts a child envd; skipped in -short")
	}
	url, _ := startReapingEnvd(t)
	c := processconnect.NewProcessClient(http.DefaultClient, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := false
	stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}},
		Stdin:   &f,
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("first event is not the start: %v", stream.Msg())
	}
	defer func() { _ = unix.Kill(int(pid), unix.SIGKILL) }()
	path := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got = strings.TrimSpace(string(b)); got == "1000" {
			return
		}
	}
	t.Errorf("%s = %s, want 1000", path, got)
}
