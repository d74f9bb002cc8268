package teamroutes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/sdk/reason"
)

// base is the time the tests' lines start at.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// logServer is the log routes on a store with two teams' sandboxes.
func logServer(t *testing.T) (*sqlite.DB, http.Handler) {
	db := newDB(t)
	owners := map[string]string{"sb_a": "team_a", "sb_b": "team_b"}
	h := serve(Config{
		Logs: db, Commands: db,
		LogSandbox: func(ctx context.Context, team, id string) (string, error) {
			if owners[id] != team {
				return "", fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
			}
			return "base", nil
		},
	})
	return db, h
}

func getJSON(t *testing.T, h http.Handler, team, url string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest("GET", url, nil)
	if team != "" {
		r.Header.Set("X-Team", team)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET %s: %d %q: %v", url, w.Code, w.Body.String(), err)
	}
	return w.Code, body
}

func TestLogRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, h := logServer(t)
	var lines []store.LogLine
	for i := range 5 {
		lines = append(lines, store.LogLine{Time: base.Add(time.Duration(i) * time.Millisecond), SandboxID: "sb_a",
			TeamID: "team_a", TemplateID: "base", Level: "info", Source: store.SourceProcess, Stream: "stdout",
			PID: 9, RequestID: "req_1", Message: fmt.Sprint("out ", i), Fields: map[string]any{"taskId": "t1", "n": float64(i)}})
	}
	lines = append(lines, store.LogLine{Time: base.Add(time.Second), SandboxID: "sb_a", TeamID: "team_a",
		Level: "error", Source: store.SourceEnvd, Message: "envd failed"})
	if err := db.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	code := 0
	if err := db.UpsertCommand(ctx, &store.CommandRecord{SandboxID: "sb_a", TeamID: "team_a", PID: 9, Tag: "t",
		RequestID: "req_1", User: "user", Command: "/bin/bash", Args: []string{"-c", "ls"}, Cwd: "/",
		StartedAt: base, EndedAt: base.Add(1500 * time.Microsecond), ExitCode: &code, EndCause: reason.EndExited,
		StdoutBytes: 3, StdoutHead: "ls\n"}); err != nil {
		t.Fatal(err)
	}

	t.Run("v2 logs have E2B's shape with string fields", func(t *testing.T) {
		status, body := getJSON(t, h, "team_a", "/v2/sandboxes/sb_a/logs?limit=1")
		if status != 200 {
			t.Fatalf("status %d: %v", status, body)
		}
		want := map[string]any{
			"logs": []any{map[string]any{"timestamp": "2026-03-01T12:00:00Z", "message": "out 0", "level": "info",
				"fields": map[string]any{"taskId": "t1", "n": "0", "source": "process", "stream": "stdout",
					"process.pid": "9", "request_id": "req_1", "sandbox.id": "sb_a"}}},
			"nextCursor": body["nextCursor"],
		}
		if !reflect.DeepEqual(body, want) {
			t.Errorf("got %v\nwant %v", body, want)
		}
		if _, ok := body["nextCursor"].(string); !ok {
			t.Errorf("nextCursor %v, want a string", body["nextCursor"])
		}
	})

	t.Run("nextCursor pages without repeats", func(t *testing.T) {
		var got []string
		url := "/v2/sandboxes/sb_a/logs?limit=2&direction=backward"
		for range 10 {
			_, body := getJSON(t, h, "team_a", url)
			for _, l := range body["logs"].([]any) {
				got = append(got, l.(map[string]any)["message"].(string))
			}
			next, ok := body["nextCursor"].(string)
			if !ok {
				break
			}
			url = "/v2/sandboxes/sb_a/logs?limit=2&direction=backward&cursor=" + next
		}
		if want := []string{"envd failed", "out 4", "out 3", "out 2", "out 1", "out 0"}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
	})

	for _, tc := range []struct{ name, query, want string }{
		{"level is the lowest kept", "level=error", "envd failed"},
		{"search", "search=OUT+3", "out 3"},
		{"a field filter", "fields.n=2", "out 2"},
		{"two field filters", "fields.n=4&fields.taskId=t1", "out 4"},
		{"an E2B millisecond cursor", "cursor=" + fmt.Sprint(base.Add(time.Second).UnixMilli()), "envd failed"},
		{"request id, source, stream and pid", "request_id=req_1&source=process&stream=stdout&pid=9&limit=1", "out 0"},
		{"source envd", "source=envd", "envd failed"},
	} {
		t.Run("v2 filter: "+tc.name, func(t *testing.T) {
			status, body := getJSON(t, h, "team_a", "/v2/sandboxes/sb_a/logs?"+tc.query)
			logs, _ := body["logs"].([]any)
			if status != 200 || len(logs) != 1 || logs[0].(map[string]any)["message"] != tc.want {
				t.Errorf("status %d, body %v; want only %q", status, body, tc.want)
			}
		})
	}

	t.Run("the legacy listing has timestamp and line", func(t *testing.T) {
		status, body := getJSON(t, h, "team_a", "/sandboxes/sb_a/logs?limit=1&start="+fmt.Sprint(base.UnixMilli()))
		logs, _ := body["logs"].([]any)
		if status != 200 || len(logs) != 1 || !reflect.DeepEqual(logs[0], map[string]any{"timestamp": "2026-03-01T12:00:00Z", "line": "out 0"}) {
			t.Errorf("status %d, body %v", status, body)
		}
	})

	t.Run("a command record has camelCase fields", func(t *testing.T) {
		status, body := getJSON(t, h, "team_a", "/sandboxes/sb_a/commands/9")
		want := map[string]any{"sandboxId": "sb_a", "pid": 9.0, "tag": "t", "requestId": "req_1", "user": "user",
			"command": "/bin/bash", "args": []any{"-c", "ls"}, "cwd": "/", "startedAt": "2026-03-01T12:00:00Z",
			"endedAt": "2026-03-01T12:00:00.0015Z", "durationMs": 1.5, "exitCode": 0.0, "signal": "",
			"endCause": "exited", "signalRequestId": "", "killReason": "", "stdoutBytes": 3.0, "stderrBytes": 0.0,
			"stdoutHead": "ls\n", "stdoutTail": "", "stderrHead": "", "stderrTail": "", "truncated": false,
			"redactions": map[string]any{}}
		if status != 200 || !reflect.DeepEqual(body, want) {
			t.Errorf("status %d\ngot  %v\nwant %v", status, body, want)
		}
	})

	t.Run("the command listing wraps records with a cursor", func(t *testing.T) {
		status, body := getJSON(t, h, "team_a", "/sandboxes/sb_a/commands?limit=5")
		cmds, _ := body["commands"].([]any)
		if status != 200 || len(cmds) != 1 || body["nextCursor"] != nil {
			t.Errorf("status %d, body %v", status, body)
		}
	})

	for _, tc := range []struct {
		name, team, url string
		code            int
	}{
		{"another team's sandbox logs are not found", "team_b", "/v2/sandboxes/sb_a/logs", 404},
		{"another team's legacy logs are not found", "team_b", "/sandboxes/sb_a/logs", 404},
		{"another team's commands are not found", "team_b", "/sandboxes/sb_a/commands", 404},
		{"another team's command is not found", "team_b", "/sandboxes/sb_a/commands/9", 404},
		{"an unknown pid is not found", "team_a", "/sandboxes/sb_a/commands/10", 404},
		{"no team is unauthorized", "", "/v2/sandboxes/sb_a/logs", 401},
		{"a bad level is a bad request", "team_a", "/v2/sandboxes/sb_a/logs?level=loud", 400},
		{"a bad direction is a bad request", "team_a", "/v2/sandboxes/sb_a/logs?direction=up", 400},
		{"a limit over 1000 is a bad request", "team_a", "/v2/sandboxes/sb_a/logs?limit=1001", 400},
		{"a bad cursor is a bad request", "team_a", "/v2/sandboxes/sb_a/logs?cursor=zz!", 400},
		{"a bad command cursor is a bad request", "team_a", "/sandboxes/sb_a/commands?cursor=zz!", 400},
		{"a bad pid is a bad request", "team_a", "/sandboxes/sb_a/commands/x", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := getJSON(t, h, tc.team, tc.url)
			if status != tc.code || body["code"] != float64(tc.code) || body["requestId"] == "" || body["message"] == "" {
				t.Errorf("status %d, body %v; want %d", status, body, tc.code)
			}
		})
	}

	t.Run("without a sandbox check, another team still sees no lines", func(t *testing.T) {
		h := serve(Config{Logs: db, Commands: db})
		status, body := getJSON(t, h, "team_b", "/v2/sandboxes/sb_a/logs")
		if logs, _ := body["logs"].([]any); status != 200 || len(logs) != 0 {
			t.Errorf("status %d, body %v", status, body)
		}
		if status, _ := getJSON(t, h, "team_b", "/sandboxes/sb_a/commands/9"); status != 404 {
			t.Errorf("command: status %d, want 404", status)
		}
	})
}

func TestTheSandboxsMetadataIsJoinedAtQueryTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	h := serve(Config{Logs: db, Commands: db,
		Labels: func(_ context.Context, team, id string) (map[string]string, error) {
			return map[string]string{"taskId": "t-42"}, nil
		}})
	// The lines carry no metadata; one claims a taskId of its own.
	if err := db.InsertLogs(ctx, []store.LogLine{
		{Time: base, SandboxID: "sb_a", TeamID: "team_a", Level: "info", Source: store.SourceProcess, Message: "plain"},
		{Time: base.Add(time.Millisecond), SandboxID: "sb_a", TeamID: "team_a", Level: "info", Source: store.SourceProcess,
			Message: "forging", Fields: map[string]any{"taskId": "forged"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, query string
		want        int
	}{
		{"a filter on the sandbox's label matches every line", "fields.taskId=t-42", 2},
		{"a line's forged label matches nothing: the host's wins", "fields.taskId=forged", 0},
		{"a filter on the sandbox id label matches every line", "fields.sandbox.id=sb_a", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := getJSON(t, h, "team_a", "/v2/sandboxes/sb_a/logs?"+tt.query)
			logs, _ := body["logs"].([]any)
			if status != 200 || len(logs) != tt.want {
				t.Fatalf("status %d, %d lines, want %d: %v", status, len(logs), tt.want, body)
			}
			for _, l := range logs {
				if f := l.(map[string]any)["fields"].(map[string]any); f["taskId"] != "t-42" || f["sandbox.id"] != "sb_a" {
					t.Errorf("line fields %v: want the host's taskId and sandbox id", f)
				}
			}
		})
	}
}
