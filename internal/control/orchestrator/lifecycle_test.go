package orchestrator

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
	"github.com/cove-dev/cove/sdk/reason"
)

func TestTimerExpiry(t *testing.T) {
	t.Run("a running sandbox past its timeout is killed for timeout by the system", func(t *testing.T) {
		h := newHarness(t)
		sb := h.create(CreateRequest{Timeout: 20 * time.Millisecond})
		h.checkKilled(sb.ID, reason.KillTimeout, SystemRequestID, "", store.StateRunning)
	})
	t.Run("a sandbox with auto-pause is paused at its timeout, not killed", func(t *testing.T) {
		h := newHarness(t)
		sb := h.create(CreateRequest{Timeout: 20 * time.Millisecond, AutoPause: true})
		// The record says paused a moment before the event is stored: wait for both.
		h.waitFor("the sandbox is paused and its event stored", func() bool {
			return h.record(sb.ID).State == store.StatePaused && slices.Contains(eventTypes(h.events(sb.ID)), string(events.SandboxPaused))
		})
		ev, _ := h.event(sb.ID, events.SandboxPaused)
		if ev.RequestID != SystemRequestID {
			t.Errorf("pause event request id %q, want %q", ev.RequestID, SystemRequestID)
		}
	})
	t.Run("a sandbox whose auto-pause fails is killed for timeout, saying why", func(t *testing.T) {
		h := newHarness(t)
		h.rt.set(func(f *fakeRuntime) { f.freezeErr = errFake })
		sb := h.create(CreateRequest{Timeout: 20 * time.Millisecond, AutoPause: true})
		h.checkKilled(sb.ID, reason.KillTimeout, SystemRequestID, "", store.StateRunning)
		if d := h.logLines("sandbox killed", sb.ID)[0]["detail"]; !strings.Contains(d.(string), "auto-pause failed") {
			t.Errorf("kill detail %q does not say the auto-pause failed", d)
		}
	})
	t.Run("a shortened timeout wakes the evictor", func(t *testing.T) {
		h := newHarness(t)
		sb := h.create(CreateRequest{Timeout: time.Hour})
		if err := h.o.SetTimeout(h.ctx("req-ttl"), h.team, sb.ID, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		h.checkKilled(sb.ID, reason.KillTimeout, SystemRequestID, "", store.StateRunning)
		_, data := h.event(sb.ID, events.SandboxUpdated)
		if data["end_at"] == nil {
			t.Errorf("updated event without end_at: %v", data)
		}
	})
	t.Run("a paused sandbox's timeout passes without a kill", func(t *testing.T) {
		h := newHarness(t)
		paused := h.paused(CreateRequest{Timeout: time.Hour})
		// Its timeout passes while it is paused (set after the pause, so no kill can race it).
		if err := h.o.SetTimeout(h.ctx("req-ttl"), h.team, paused.ID, 10*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		later := h.create(CreateRequest{Timeout: 30 * time.Millisecond})
		h.waitKilled(later.ID) // the evictor has looked at both deadlines by now
		if got := h.record(paused.ID); got.State != store.StatePaused {
			t.Errorf("the paused sandbox is %s", got.State)
		}
	})
}

func TestTimeoutChanges(t *testing.T) {
	h := newHarness(t)
	sb := h.create(CreateRequest{Timeout: time.Hour})
	tests := []struct {
		name    string
		call    func() error
		wantErr error
		check   func(end time.Time) bool
	}{
		{"refresh never shortens the timeout", func() error { return h.o.Refresh(h.ctx("r1"), h.team, sb.ID, time.Minute) }, nil,
			func(end time.Time) bool { return time.Until(end) > 50*time.Minute }},
		{"set timeout shortens it", func() error { return h.o.SetTimeout(h.ctx("r2"), h.team, sb.ID, 2*time.Hour) }, nil,
			func(end time.Time) bool { return time.Until(end) > 90*time.Minute }},
		{"refresh without a duration extends by a minute at least", func() error { return h.o.Refresh(h.ctx("r3"), h.team, sb.ID, 0) }, nil,
			func(end time.Time) bool { return time.Until(end) > 90*time.Minute }},
		{"a timeout over the maximum is invalid", func() error { return h.o.SetTimeout(h.ctx("r4"), h.team, sb.ID, 25*time.Hour) }, ErrInvalid, nil},
		{"a negative timeout is invalid", func() error { return h.o.SetTimeout(h.ctx("r5"), h.team, sb.ID, -time.Second) }, ErrInvalid, nil},
		{"another team's sandbox is not found", func() error { return h.o.SetTimeout(h.ctx("r6"), "other", sb.ID, time.Minute) }, ErrNotFound, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if tt.check != nil && !tt.check(h.record(sb.ID).EndAt) {
				t.Errorf("end at %s", h.record(sb.ID).EndAt)
			}
		})
	}
	if err := h.o.Kill(h.ctx("k"), h.team, sb.ID, reason.KillRequest, ""); err != nil {
		t.Fatal(err)
	}
	var gone *GoneError
	if err := h.o.SetTimeout(h.ctx("r7"), h.team, sb.ID, time.Minute); !errors.As(err, &gone) {
		t.Errorf("set timeout of a killed sandbox: %v, want GoneError", err)
	}
}

func TestPauseResumeConnect(t *testing.T) {
	h := newHarness(t)
	sb := h.create(CreateRequest{})
	ctx := h.ctx("req-1")
	var conflict = ErrConflict
	steps := []struct {
		name      string
		call      func() error
		wantErr   error
		wantState store.SandboxState
	}{
		{"resuming a running sandbox is a conflict", func() error { _, err := h.o.Resume(ctx, h.team, sb.ID, 0); return err }, conflict, store.StateRunning},
		{"pause freezes it", func() error { return h.o.Pause(ctx, h.team, sb.ID) }, nil, store.StatePaused},
		{"pausing it again is a conflict", func() error { return h.o.Pause(ctx, h.team, sb.ID) }, conflict, store.StatePaused},
		{"resume thaws it", func() error { _, err := h.o.Resume(ctx, h.team, sb.ID, time.Minute); return err }, nil, store.StateRunning},
		{"connect to a running one extends it and says it did not resume", func() error {
			_, resumed, err := h.o.Connect(ctx, h.team, sb.ID, time.Hour)
			if err == nil && resumed {
				return errors.New("connect says it resumed a running sandbox")
			}
			return err
		}, nil, store.StateRunning},
		{"connect to a paused one resumes it", func() error {
			if err := h.o.Pause(ctx, h.team, sb.ID); err != nil {
				return err
			}
			_, resumed, err := h.o.Connect(ctx, h.team, sb.ID, time.Minute)
			if err == nil && !resumed {
				return errors.New("connect did not say it resumed")
			}
			return err
		}, nil, store.StateRunning},
		{"a timeout over the maximum is invalid", func() error { _, _, err := h.o.Connect(ctx, h.team, sb.ID, 48*time.Hour); return err }, ErrInvalid, store.StateRunning},
		{"another team cannot pause it", func() error { return h.o.Pause(ctx, "other", sb.ID) }, ErrNotFound, store.StateRunning},
		{"another team cannot resume it", func() error { _, err := h.o.Resume(ctx, "other", sb.ID, 0); return err }, ErrNotFound, store.StateRunning},
		{"another team cannot connect", func() error { _, _, err := h.o.Connect(ctx, "other", sb.ID, 0); return err }, ErrNotFound, store.StateRunning},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.call(); !errors.Is(err, s.wantErr) {
				t.Fatalf("err %v, want %v", err, s.wantErr)
			}
			if got := h.record(sb.ID).State; got != s.wantState {
				t.Errorf("recorded %s, want %s", got, s.wantState)
			}
			if got, _ := h.rt.State(context.Background(), sb.ID); (got == "paused") != (s.wantState == store.StatePaused) {
				t.Errorf("runtime says %s, want %s", got, s.wantState)
			}
		})
	}
	want := []string{"sandbox.lifecycle.created", "sandbox.lifecycle.paused", "sandbox.lifecycle.resumed",
		"sandbox.lifecycle.connected", "sandbox.lifecycle.paused", "sandbox.lifecycle.resumed"}
	if got := eventTypes(h.events(sb.ID)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events %v\nwant   %v", got, want)
	}
	if err := h.o.Kill(ctx, h.team, sb.ID, reason.KillRequest, ""); err != nil {
		t.Fatal(err)
	}
	var gone *GoneError
	if err := h.o.Pause(ctx, h.team, sb.ID); !errors.As(err, &gone) {
		t.Errorf("pause of a killed sandbox: %v", err)
	}
	if _, _, err := h.o.Connect(ctx, h.team, sb.ID, 0); !errors.As(err, &gone) {
		t.Errorf("connect to a killed sandbox: %v", err)
	}
}

func TestAFailedPauseLeavesTheSandboxRunning(t *testing.T) {
	h := newHarness(t)
	sb := h.create(CreateRequest{})
	h.rt.set(func(f *fakeRuntime) { f.freezeErr = errFake })
	if err := h.o.Pause(h.ctx("p"), h.team, sb.ID); !errors.Is(err, errFake) {
		t.Fatalf("pause: %v, want the runtime's error", err)
	}
	if got := h.record(sb.ID).State; got != store.StateRunning {
		t.Errorf("recorded %s after a failed pause", got)
	}
}

func TestCreate(t *testing.T) {
	t.Run("a sandbox is recorded running with its request, metadata and env names, and envd is initialised", func(t *testing.T) {
		h := newHarness(t)
		sb := h.create(CreateRequest{Metadata: map[string]string{"task": "t-1"}, EnvVars: map[string]string{"API_TOKEN": "tok-123", "MODE": "x"},
			Secure: true, Timeout: time.Minute})
		rec := h.record(sb.ID)
		if rec.State != store.StateRunning || rec.CreatedBy != "req-create" || rec.Metadata["task"] != "t-1" || len(rec.EnvVarNames) != 2 ||
			rec.EnvdAccessToken == "" || rec.EnvdVersion != EnvdVersion {
			t.Errorf("record %+v", rec)
		}
		// envd got the env vars and the token: /envs answers only with the token.
		c := h.o.envdClient(sb.ID)
		res := envdGet(t, c, "/envs", "")
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("/envs without the token: %s", res.Status)
		}
		res = envdGet(t, c, "/envs", rec.EnvdAccessToken)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"MODE":"x"`) {
			t.Errorf("/envs with the token: %s %s", res.Status, body)
		}
		if got := h.o.SecureSandboxes(context.Background()); len(got) != 1 || got[0].ID != sb.ID {
			t.Errorf("secure sandboxes %v", got)
		}
		if _, data := h.event(sb.ID, events.SandboxCreated); data["secure"] != true {
			t.Errorf("created event %v", data)
		}
	})
	tests := []struct {
		name      string
		req       CreateRequest
		breakRT   func(f *fakeRuntime)
		ctx       func() (context.Context, context.CancelFunc)
		wantErr   error
		wantInErr string
	}{
		{"an unknown template is a template-not-found naming the build command", CreateRequest{TemplateID: "nope"}, nil, nil,
			ErrTemplateNotFound, "cove template build nope"},
		{"a negative timeout is invalid", CreateRequest{Timeout: -time.Second}, nil, nil, ErrInvalid, "negative"},
		{"a timeout over the maximum is invalid", CreateRequest{Timeout: 25 * time.Hour}, nil, nil, ErrInvalid, "maximum"},
		{"a runtime that cannot create fails the create", CreateRequest{}, func(f *fakeRuntime) { f.createErr = errFake }, nil, errFake, "create sandbox"},
		{"an envd that never answers fails the create and the sandbox is destroyed", CreateRequest{}, func(f *fakeRuntime) { f.envdDown = true },
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 300*time.Millisecond)
			},
			context.DeadlineExceeded, "did not come up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if tt.breakRT != nil {
				h.rt.set(tt.breakRT)
			}
			ctx := h.ctx("req-create")
			if tt.ctx != nil {
				c, cancel := tt.ctx()
				defer cancel()
				ctx = telemetry.WithRequestID(c, "req-create")
			}
			tt.req.TeamID = h.team
			sb, err := h.o.Create(ctx, tt.req)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Fatalf("create: %v (%v), want %v containing %q", err, sb, tt.wantErr, tt.wantInErr)
			}
			page, err := h.o.List(context.Background(), store.SandboxFilter{TeamID: h.team, States: []store.SandboxState{store.StateRunning, store.StatePaused, store.StateKilled}})
			if err != nil || len(page.Sandboxes) != 0 {
				t.Errorf("a failed create left records: %v %v", page, err)
			}
			if ids, _ := h.rt.List(context.Background()); len(ids) != 0 {
				t.Errorf("a failed create left runtime sandboxes %v", ids)
			}
		})
	}
	t.Run("a template with a user makes it envd's default user", func(t *testing.T) {
		if _, err := os.Stat("/etc/passwd"); err != nil {
			t.Skip("no /etc/passwd on this host")
		}
		b, _ := os.ReadFile("/etc/passwd")
		if !strings.Contains("\n"+string(b), "\nuser:") {
			t.Skip("this host has no user \"user\" for envd (run in-process) to switch to")
		}
		h := newHarness(t)
		h.addTemplate("base", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
		h.create(CreateRequest{})
	})
	t.Run("a user in the template that envd cannot find fails the init", func(t *testing.T) {
		b, _ := os.ReadFile("/etc/passwd")
		if strings.Contains("\n"+string(b), "\nuser:") {
			t.Skip("this host has a user \"user\", so envd (run in-process) finds it")
		}
		h := newHarness(t)
		h.addTemplate("base", "user:x:1000:1000::/home/user:/bin/sh\n")
		_, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team})
		if err == nil || !strings.Contains(err.Error(), "init envd") {
			t.Fatalf("create: %v, want an init error", err)
		}
	})
}

func envdGet(t *testing.T, c *http.Client, path, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://envd"+path, nil)
	if token != "" {
		req.Header.Set(envd.HeaderAccessToken, token)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestKillWhileCreating(t *testing.T) {
	t.Run("a kill by id for any reason before the create returns finds nothing, and the create completes", func(t *testing.T) {
		h := newHarness(t)
		id, release, done := h.createHeld()
		for _, why := range reason.KillReasons {
			if err := h.o.Kill(h.ctx("req-kill"), h.team, id, why, ""); !errors.Is(err, ErrNotFound) {
				t.Errorf("kill for %s during create: %v, want ErrNotFound", why, err)
			}
		}
		release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := h.record(id).State; got != store.StateRunning {
			t.Errorf("recorded %s", got)
		}
	})
	t.Run("a shutdown during a create kills the new sandbox for server_shutdown", func(t *testing.T) {
		h := newHarness(t)
		id, release, done := h.createHeld()
		h.o.Shutdown(context.Background())
		release()
		err := <-done
		var gone *GoneError
		if !errors.As(err, &gone) || gone.Reason != reason.KillServerShutdown {
			t.Fatalf("create during shutdown: %v, want a GoneError for server_shutdown", err)
		}
		h.checkKilled(id, reason.KillServerShutdown, SystemRequestID, "", store.StateRunning)
	})
}

func TestACommandRunningAtTheKillEndsWithItsSandbox(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh on the host: envd runs in-process here")
	}
	h := newHarness(t)
	sb := h.create(CreateRequest{})
	c := processconnect.NewProcessClient(h.o.envdClient(sb.ID), "http://envd")
	no := false
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 60"}}, Stdin: &no})
	req.Header().Set(telemetry.HeaderRequestID, "req-run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for pid == 0 && stream.Receive() {
		pid = stream.Msg().GetEvent().GetStart().GetPid()
	}
	if pid == 0 {
		t.Fatalf("no start event: %v", stream.Err())
	}
	h.waitFor("the command's start is recorded", func() bool {
		_, err := h.db.GetCommand(context.Background(), sb.ID, int(pid), time.Time{})
		return err == nil
	})
	if err := h.o.Kill(h.ctx("req-kill"), h.team, sb.ID, reason.KillAdmin, ""); err != nil {
		t.Fatal(err)
	}
	var rec *store.CommandRecord
	h.waitFor("the command's record is closed", func() bool {
		rec, err = h.db.GetCommand(context.Background(), sb.ID, int(pid), time.Time{})
		return err == nil && !rec.EndedAt.IsZero()
	})
	if rec.EndCause != reason.EndSandboxKilled || rec.KillReason != reason.KillAdmin || rec.RequestID != "req-run" {
		t.Errorf("record: end cause %q, kill reason %q, request %q; want %q, admin, req-run", rec.EndCause, rec.KillReason, rec.RequestID, reason.EndSandboxKilled)
	}
}

func TestRecoverAfterARestart(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := func(id string, state store.SandboxState) *store.Sandbox {
		sb := &store.Sandbox{ID: id, TeamID: h.team, TemplateID: "base", State: state, Metadata: map[string]string{}, StartedAt: now.Add(-time.Hour),
			EndAt: now.Add(time.Hour), UpdatedAt: now, CPUCount: 2, MemoryMB: 512}
		if state == store.StateKilled {
			sb.KilledAt, sb.KillReason, sb.KillRequestID = &now, reason.KillRequest, "req-old"
		}
		if err := h.db.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	running, paused, killed := rec("irunning000000000000", store.StateRunning), rec("ipaused0000000000000", store.StatePaused), rec("ikilled0000000000000", store.StateKilled)
	if err := h.db.UpsertCommand(ctx, &store.CommandRecord{SandboxID: running.ID, TeamID: h.team, PID: 42, RequestID: "req-run", Command: "sleep", StartedAt: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	h.rt.set(func(f *fakeRuntime) { f.leftovers = []string{running.ID, "ileftover00000000000"} })

	if err := h.o.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		id    string
		state store.SandboxState
	}{
		{"a sandbox recorded running is killed for orphaned", running.ID, store.StateRunning},
		{"a sandbox recorded paused is killed for orphaned", paused.ID, store.StatePaused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.checkKilled(tt.id, reason.KillOrphaned, SystemRequestID, "", tt.state)
			if d := h.logLines("sandbox killed", tt.id)[0]["detail"]; d != "the server restarted and its runtime cannot take sandboxes over" { // the fake runtime cannot adopt (test/restart covers adoption)
				t.Errorf("detail %q", d)
			}
		})
	}
	t.Run("a sandbox killed before the restart keeps its reason", func(t *testing.T) {
		if got := h.record(killed.ID); got.KillReason != reason.KillRequest || got.KillRequestID != "req-old" {
			t.Errorf("record %+v", got)
		}
	})
	t.Run("a runtime leftover without a record is destroyed", func(t *testing.T) {
		if !h.rt.wasDestroyed("ileftover00000000000") {
			t.Error("not destroyed")
		}
		if len(h.logLines("recover: destroyed leftover sandbox without a record", "ileftover00000000000")) != 1 {
			t.Errorf("not logged:\n%s", h.logs.String())
		}
	})
	t.Run("a command record the crash left open is closed with the sandbox's reason", func(t *testing.T) {
		c, err := h.db.GetCommand(ctx, running.ID, 42, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if c.EndedAt.IsZero() || c.EndCause != reason.EndSandboxKilled || c.KillReason != reason.KillOrphaned {
			t.Errorf("command record %+v", c)
		}
	})
	t.Run("a runtime that cannot list fails the recovery", func(t *testing.T) {
		h.rt.set(func(f *fakeRuntime) { f.listErr = errFake })
		if err := h.o.Recover(ctx); !errors.Is(err, errFake) {
			t.Errorf("recover: %v", err)
		}
	})
}

func TestDialPortAndWatch(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			_ = c.Close()
		}
	}()
	auto := h.create(CreateRequest{AutoResume: true})
	manual := h.create(CreateRequest{})
	for _, sb := range []*store.Sandbox{auto, manual} {
		h.rt.set(func(f *fakeRuntime) { f.sandboxes[sb.ID].ports[8000] = ln.Addr().String() })
		if err := h.o.Pause(h.ctx("p"), h.team, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		id      string
		port    int
		wantErr func(error) bool
	}{
		{"a paused sandbox with auto-resume is resumed and dialled", auto.ID, 8000, func(err error) bool { return err == nil }},
		{"a paused sandbox without auto-resume is a paused error", manual.ID, 8000, func(err error) bool { var p *PausedError; return errors.As(err, &p) }},
		{"a port out of range is invalid", auto.ID, 70000, func(err error) bool { return errors.Is(err, ErrInvalid) }},
		{"an unknown sandbox is not found", "inosuchsandbox000000", 8000, func(err error) bool { return errors.Is(err, ErrNotFound) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := h.o.DialPort(h.ctx("d"), tt.id, tt.port)
			if !tt.wantErr(err) {
				t.Fatalf("dial: %v", err)
			}
			if c != nil {
				b, _ := io.ReadAll(c)
				c.Close()
				if string(b) != "hello\n" {
					t.Errorf("read %q", b)
				}
			}
		})
	}
	if got := h.record(auto.ID).State; got != store.StateRunning {
		t.Errorf("the auto-resume sandbox is %s after a dial", got)
	}
	var p *PausedError
	_, err = h.o.DialPort(h.ctx("d"), manual.ID, 8000)
	if errors.As(err, &p) && !strings.Contains(err.Error(), "auto-resume is off") {
		t.Errorf("paused error %q does not say why", err)
	}

	t.Run("a watched connection is closed when its sandbox is killed", func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		stop := h.o.Watch(auto.ID, a)
		defer stop()
		if err := h.o.Kill(h.ctx("k"), h.team, auto.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("write after the kill: %v, want closed", err)
		}
	})
	t.Run("watching a sandbox that is gone closes at once", func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		h.o.Watch(auto.ID, a)()
		if _, err := a.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("write: %v, want closed", err)
		}
	})
	t.Run("an unwatched connection stays open at a pause", func(t *testing.T) {
		sb := h.create(CreateRequest{})
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		h.o.Watch(sb.ID, a)()
		if err := h.o.Pause(h.ctx("p"), h.team, sb.ID); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.ReadAll(b) }()
		if _, err := a.Write([]byte("x")); err != nil {
			t.Errorf("write: %v", err)
		}
	})
}

func TestListingsAndLookups(t *testing.T) {
	h := newHarness(t)
	a := h.create(CreateRequest{Metadata: map[string]string{"k": "a"}})
	b := h.paused(CreateRequest{Metadata: map[string]string{"k": "b"}})
	if got := h.o.Running(); len(got) != 1 || got[0].ID != a.ID {
		t.Errorf("running %v, want only %s", got, a.ID)
	}
	page, err := h.o.List(context.Background(), store.SandboxFilter{TeamID: h.team, Metadata: map[string]string{"k": "b"}})
	if err != nil || len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != b.ID {
		t.Errorf("list by metadata: %v %v", page, err)
	}
	if sb, err := h.o.Lookup(context.Background(), b.ID); err != nil || sb.State != store.StatePaused {
		t.Errorf("lookup: %v %v", sb, err)
	}
	// A record this server does not hold (another server's, or a crash's) is not found.
	other := &store.Sandbox{ID: "iother00000000000000", TeamID: h.team, TemplateID: "base", State: store.StateRunning, Metadata: map[string]string{},
		StartedAt: time.Now(), EndAt: time.Now().Add(time.Hour), UpdatedAt: time.Now()}
	if err := h.db.InsertSandbox(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if _, err := h.o.Get(context.Background(), h.team, other.ID); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not held by this server") {
		t.Errorf("get of an unheld record: %v", err)
	}
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a store, runtime and templates succeeded")
	}
	h := newHarness(t)
	logDir := filepath.Join(h.dir, "file")
	if err := os.WriteFile(logDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Store: h.db, Runtime: h.rt, Templates: h.templates, LogDir: filepath.Join(logDir, "logs")}); err == nil {
		t.Error("New with a log dir under a file succeeded")
	}
}
