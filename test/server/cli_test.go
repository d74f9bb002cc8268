package server

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// coveCLI runs a client verb of the cove binary against the server.
func coveCLI(t *testing.T, s *covetest.Server, args ...string) string {
	t.Helper()
	cmd := exec.Command(covetest.Binary(t), args...)
	cmd.Env = append(os.Environ(), "COVE_API_URL="+s.URL, "COVE_API_KEY="+s.Key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestObservabilityVerbs(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(map[string]any{"metadata": map[string]string{"taskId": "cli-task"}})
	run(t, s, id, "echo from-the-task; exit 2", "req-cli-run")
	time.Sleep(500 * time.Millisecond) // the ingester flushes every 200 ms
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil, "X-E2B-Request-Id", "req-cli-kill"); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	time.Sleep(300 * time.Millisecond)

	checks := []struct {
		name string
		args []string
		want []string
	}{
		{"cove logs filters by the task id and the request", []string{"logs", id, "--field", "taskId=cli-task", "--request-id", "req-cli-run"}, []string{"from-the-task"}},
		{"cove events lists the kill with its reason", []string{"events", id}, []string{"killed", "kill_reason=request", "req-cli-kill"}},
		{"cove commands shows the exit code", []string{"commands", id}, []string{"exit 2", "req-cli-run"}},
		{"cove trace joins envd's and the command's steps", []string{"trace", "req-cli-run"}, []string{"stream end", "exited 2", "from-the-task"}},
		{"cove explain names the request and key that killed it", []string{"explain", id}, []string{"was killed", "reason request", "req-cli-kill", "API key initial", "processes at the kill"}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			out := coveCLI(t, s, c.args...)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	t.Run("cove trace merges a client's JSON log", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "client.log")
		line := `{"time":"` + time.Now().Add(-time.Hour).Format(time.RFC3339Nano) + `","level":"WARN","msg":"stream cancelled","request_id":"req-cli-run","cancel.cause":"timeout"}` + "\n"
		if err := os.WriteFile(log, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		out := coveCLI(t, s, "trace", "req-cli-run", "--client-log", log)
		if !strings.Contains(out, "client  stream cancelled  (cancel.cause=timeout)") {
			t.Errorf("client line not merged:\n%s", out)
		}
	})
}
