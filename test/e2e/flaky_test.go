package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/sdk/gen/process"
)

// The three scenarios E2B's own suite reports as flaky, made deterministic: each is repeated
// $COVE_E2E_REPEAT times (3 by default) on one sandbox, and each repetition checks every step.

func repeat(t *testing.T) int {
	t.Helper()
	s := os.Getenv("COVE_E2E_REPEAT")
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("COVE_E2E_REPEAT=%q is not a positive number", s)
	}
	return n
}

// spawner is an npx-style command: bash with children that keep printing until killed.
const spawner = `for i in 1 2 3; do (while true; do echo $i; sleep 0.05; done) & done; wait`

// TestKillMidStream is scenario (a): SIGKILL of a command whose children keep printing ends
// the stream cleanly with its end event, and leaves no process behind.
func TestKillMidStream(t *testing.T) {
	need(t)

	sb := create(t, nil)
	e := envdOf(sb)
	n := repeat(t)
	for i := 1; i <= n; i++ {
		t.Run(fmt.Sprintf("attempt %d of %d", i, n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stream, err := e.startCmd(ctx, spawner)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			defer stream.Close()

			var pid uint32
			seen := map[string]bool{}
			var end *process.ProcessEvent_EndEvent
			var killedAt time.Time
			for end == nil && stream.Receive() {
				ev := stream.Msg().GetEvent()
				switch {
				case ev.GetStart() != nil:
					pid = ev.GetStart().GetPid()
				case ev.GetData() != nil:
					for _, l := range strings.Fields(string(ev.GetData().GetStdout())) {
						seen[l] = true
					}
					if killedAt.IsZero() && seen["1"] && seen["2"] && seen["3"] {
						req := connect.NewRequest(&process.SendSignalRequest{
							Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
							Signal:  process.Signal_SIGNAL_SIGKILL,
						})
						if _, err := e.proc.SendSignal(ctx, req); err != nil {
							t.Fatalf("SendSignal SIGKILL to pid %d: %v", pid, err)
						}
						killedAt = time.Now()
					}
				case ev.GetEnd() != nil:
					end = ev.GetEnd()
				}
			}
			t.Run("every child printed before the kill", func(t *testing.T) {
				if killedAt.IsZero() {
					t.Fatalf("the stream ended before all three children printed (saw %v): %v", seen, stream.Err())
				}
			})
			if killedAt.IsZero() {
				return
			}
			t.Run("the stream ends with the end event within 2 s of the kill", func(t *testing.T) {
				if end == nil {
					t.Fatalf("no end event; stream error: %v", stream.Err())
				}
				if took := time.Since(killedAt); took > 2*time.Second {
					t.Errorf("end event %s after SendSignal, want under 2 s", took)
				}
				if end.GetExited() || end.GetStatus() != "signal: killed" {
					t.Errorf("end event exited=%v status %q exit %d, want status \"signal: killed\"", end.GetExited(), end.GetStatus(), end.GetExitCode())
				}
			})
			t.Run("the stream then closes without an error", func(t *testing.T) {
				if stream.Receive() {
					t.Errorf("a message after the end event: %v", stream.Msg())
				}
				if err := stream.Err(); err != nil {
					t.Errorf("stream error after the end event: %v", err)
				}
			})
			t.Run("no process of the killed command is left in the sandbox", func(t *testing.T) {
				// The checker is its own bash; the spawner's children carry its command line.
				check := `ps -e -o pid=,args= | grep -F 'while true' | grep -v grep || true`
				deadline := time.Now().Add(time.Second)
				for {
					left := strings.TrimSpace(e.mustRun(t, check))
					if left == "" {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("processes left 1 s after the kill:\n%s", left)
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
			t.Run("envd no longer lists the killed process", func(t *testing.T) {
				resp, err := e.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
				if err != nil {
					t.Fatalf("process.List: %v", err)
				}
				for _, p := range resp.Msg.GetProcesses() {
					if p.GetPid() == pid {
						t.Errorf("process.List still has pid %d", pid)
					}
				}
			})
		})
	}
}

// TestFilesSurvivePauseResume is scenario (b): files on the overlay root and on tmpfs keep
// their sha256 across repeated pause and resume; commands running when the sandbox is paused
// complete after it resumes, and commands started right after a resume complete too, none
// refused with a 502.
func TestFilesSurvivePauseResume(t *testing.T) {
	need(t)

	sb := create(t, nil)
	e := envdOf(sb)
	blobs := []string{"/tmp/blob", "/dev/shm/blob"}
	e.mustRun(t, "head -c 50M /dev/urandom > /tmp/blob && cp /tmp/blob /dev/shm/blob")
	want := strings.Fields(e.mustRun(t, "sha256sum /tmp/blob | cut -d' ' -f1"))[0]

	n := repeat(t)
	for i := 1; i <= n; i++ {
		t.Run(fmt.Sprintf("attempt %d of %d", i, n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out := fmt.Sprintf("/tmp/sums-%d", i)
			e.mustRun(t, "rm -rf "+out+" && mkdir "+out)

			// Ten commands, each hashing one blob into its own file, in flight at the pause.
			type flight struct {
				pid uint32
				end *process.ProcessEvent_EndEvent
				err error
			}
			flights := make([]flight, 10)
			started := make(chan int, 10)
			var wg sync.WaitGroup
			for j := range flights {
				wg.Add(1)
				go func() {
					defer wg.Done()
					script := fmt.Sprintf("sha256sum %s | cut -d' ' -f1 > %s/%d", blobs[j%2], out, j)
					stream, err := e.startCmd(ctx, script)
					if err != nil {
						flights[j].err = err
						started <- j
						return
					}
					defer stream.Close()
					sent := false
					for stream.Receive() {
						ev := stream.Msg().GetEvent()
						if ev.GetStart() != nil {
							flights[j].pid = ev.GetStart().GetPid()
							started <- j
							sent = true
						}
						if ev.GetEnd() != nil {
							flights[j].end = ev.GetEnd()
						}
					}
					if !sent {
						flights[j].err = fmt.Errorf("no start event: %v", stream.Err())
						started <- j
					}
				}()
			}
			t.Run("10 concurrent commands start, none refused", func(t *testing.T) {
				for range flights {
					select {
					case j := <-started:
						if flights[j].err != nil {
							t.Errorf("command %d: %v", j, flights[j].err)
						}
					case <-ctx.Done():
						t.Fatal("commands did not all start")
					}
				}
			})
			t.Run("pause answers 204 and the sandbox shows paused", func(t *testing.T) {
				sb.pause(t)
				if st := sb.info(t).State; st != "paused" {
					t.Fatalf("state after pause is %q", st)
				}
				if got := e.health(t); got != http.StatusBadGateway {
					t.Errorf("GET /health of the paused sandbox: %d, want 502", got)
				}
			})
			t.Run("the pause ends the open streams", func(t *testing.T) {
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("streams still open 10 s after the pause")
				}
			})
			t.Run("connect resumes it with 201", func(t *testing.T) {
				sb.connect(t, http.StatusCreated)
				if st := sb.info(t).State; st != "running" {
					t.Fatalf("state after connect is %q", st)
				}
			})
			t.Run("every command in flight at the pause completes with exit 0", func(t *testing.T) {
				inFlight := 0
				defer func() { t.Logf("%d of %d commands were still running at the pause", inFlight, len(flights)) }()
				for j, f := range flights {
					if f.err != nil || f.pid == 0 {
						continue // reported above
					}
					end := f.end
					if end == nil {
						inFlight++
						stream, err := e.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{
							Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: f.pid}},
						}))
						if err != nil {
							t.Errorf("command %d (pid %d): process.Connect after resume: %v", j, f.pid, err)
							continue
						}
						for stream.Receive() {
							if ev := stream.Msg().GetEvent().GetEnd(); ev != nil {
								end = ev
							}
						}
						if err := stream.Err(); err != nil {
							t.Errorf("command %d (pid %d): process.Connect stream: %v", j, f.pid, err)
						}
						stream.Close()
					}
					if end == nil {
						t.Errorf("command %d (pid %d): no end event after resume", j, f.pid)
					} else if end.GetExitCode() != 0 || !end.GetExited() {
						t.Errorf("command %d (pid %d): exit %d status %q error %q", j, f.pid, end.GetExitCode(), end.GetStatus(), end.GetError())
					}
				}
				sums := strings.Fields(e.mustRun(t, "cat "+out+"/*"))
				if len(sums) != len(flights) {
					t.Errorf("%d of %d commands wrote a sha256: %q", len(sums), len(flights), sums)
				}
				for _, s := range sums {
					if s != want {
						t.Errorf("a command in flight at the pause computed sha256 %s, want %s", s, want)
					}
				}
			})
			t.Run("10 commands started right after the resume all complete, none refused", func(t *testing.T) {
				var wg sync.WaitGroup
				errs := make([]string, 10)
				for j := range errs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, err := e.run(ctx, "echo "+strconv.Itoa(j))
						switch {
						case err != nil:
							errs[j] = fmt.Sprintf("command %d: %v (%s)", j, err, res)
						case res.end.GetExitCode() != 0 || res.stdout != strconv.Itoa(j)+"\n":
							errs[j] = fmt.Sprintf("command %d: %s", j, res)
						}
					}()
				}
				wg.Wait()
				for _, s := range errs {
					if s != "" {
						t.Error(s)
					}
				}
			})
			t.Run("both blobs keep their sha256", func(t *testing.T) {
				got := strings.TrimSpace(e.mustRun(t, "sha256sum "+strings.Join(blobs, " ")+" | cut -d' ' -f1 | sort -u"))
				if got != want {
					t.Errorf("sha256 after resume: %q, want %s for both", got, want)
				}
			})
		})
	}
}

// TestAutoResume is scenario (c): a paused sandbox created with autoResume resumes when an
// envd call reaches it through the proxy.
func TestAutoResume(t *testing.T) {
	need(t)

	sb := create(t, map[string]any{"autoResume": map[string]any{"enabled": true}})
	e := envdOf(sb)
	n := repeat(t)
	for i := 1; i <= n; i++ {
		t.Run(fmt.Sprintf("attempt %d of %d", i, n), func(t *testing.T) {
			marker := fmt.Sprintf("/tmp/auto-%d", i)
			e.mustRun(t, "echo "+strconv.Itoa(i)+" > "+marker)
			t.Run("pause answers 204 and the sandbox shows paused", func(t *testing.T) {
				sb.pause(t)
				if st := sb.info(t).State; st != "paused" {
					t.Fatalf("state after pause is %q", st)
				}
			})
			t.Run("an envd call through the proxy resumes it and succeeds", func(t *testing.T) {
				out := e.mustRun(t, "cat "+marker)
				if strings.TrimSpace(out) != strconv.Itoa(i) {
					t.Errorf("cat %s after auto-resume: %q, want %d", marker, out, i)
				}
			})
			t.Run("the sandbox shows running afterwards", func(t *testing.T) {
				if st := sb.info(t).State; st != "running" {
					t.Errorf("state after the auto-resuming call is %q, want running", st)
				}
			})
		})
	}
}
