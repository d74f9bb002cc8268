package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

func killedCount(why reason.KillReason) float64 {
	var m dto.Metric
	if err := telemetry.SandboxesKilled.WithLabelValues(why.String()).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// checkKilled asserts everything one kill leaves behind: the record, the event with its
// post-mortem, the destroyed runtime sandbox, the log line and the error a later call gets.
func (h *harness) checkKilled(id string, why reason.KillReason, requestID, keyID string, stateBefore store.SandboxState) {
	h.t.Helper()
	rec := h.waitKilled(id)
	if rec.KillReason != why || rec.KillRequestID != requestID || rec.KillAPIKeyID != keyID || rec.KilledAt == nil {
		h.t.Errorf("record: reason %q request %q key %q killed at %v; want %q %q %q and a time",
			rec.KillReason, rec.KillRequestID, rec.KillAPIKeyID, rec.KilledAt, why, requestID, keyID)
	}
	if !h.rt.wasDestroyed(id) {
		h.t.Errorf("the runtime sandbox %s was not destroyed", id)
	}
	ev, data := h.event(id, events.SandboxKilled)
	if data["kill_reason"] != why.String() || ev.RequestID != requestID {
		h.t.Errorf("killed event: kill_reason %v request %q; want %q %q", data["kill_reason"], ev.RequestID, why, requestID)
	}
	pm, _ := data["postmortem"].(map[string]any)
	procs, _ := pm["processes"].([]any)
	if data["end_at"] == nil || pm["at"] == nil {
		h.t.Errorf("killed event lacks end_at or the post-mortem's time: %v", data)
	}
	if h.rt.wasMade(id) && (len(procs) != len(fakeProcesses) || pm["resources"] == nil) {
		h.t.Errorf("post-mortem lacks processes or resources: %v", data)
	}
	if strings.Contains(string(ev.Data), "s3cr3t-token-value") {
		h.t.Errorf("the post-mortem leaks a secret: %s", ev.Data)
	}
	typed, err := cove.SandboxEvent{ID: ev.ID, Type: ev.Type, EventData: ev.Data}.Data()
	if k, ok := typed.(*cove.KilledEventData); err != nil || !ok || k.KillReason != why.String() || k.Postmortem == nil {
		h.t.Errorf("the SDK reads the killed event as %#v (%v)", typed, err)
	}
	lines := h.logLines("sandbox killed", id)
	if len(lines) != 1 {
		h.t.Fatalf("%d 'sandbox killed' lines for %s, want 1\n%s", len(lines), id, h.logs.String())
	}
	if l := lines[0]; l[telemetry.KeyKillReason] != why.String() || l["state_before"] != string(stateBefore) || l[telemetry.KeyRequestID] != requestID {
		h.t.Errorf("log line %v: want kill_reason %q, state_before %q, request_id %q", l, why, stateBefore, requestID)
	}
	_, err = h.o.Get(context.Background(), h.team, id)
	var gone *GoneError
	if !errors.As(err, &gone) || gone.Reason != why {
		h.t.Errorf("Get after the kill: %v; want a GoneError with reason %q", err, why)
	}
}

func TestKillByCallRecordsTheReasonInEveryState(t *testing.T) {
	for _, why := range reason.KillReasons {
		for _, state := range []store.SandboxState{store.StateRunning, store.StatePaused} {
			t.Run(fmt.Sprintf("a %s sandbox killed for %s says so in record, event, counter, log and error", state, why), func(t *testing.T) {
				h := newHarness(t)
				sb := h.create(CreateRequest{})
				if state == store.StatePaused {
					if err := h.o.Pause(h.ctx("req-pause"), h.team, sb.ID); err != nil {
						t.Fatal(err)
					}
				}
				before := killedCount(why)
				if err := h.o.Kill(h.ctx("req-kill"), h.team, sb.ID, why, "key-1"); err != nil {
					t.Fatalf("kill: %v", err)
				}
				h.checkKilled(sb.ID, why, "req-kill", "key-1", state)
				if got := killedCount(why) - before; got != 1 {
					t.Errorf("cove_sandboxes_killed_total{kill_reason=%q} grew by %v, want 1", why, got)
				}
				_, data := h.event(sb.ID, events.SandboxKilled)
				if data["api_key_name"] != "ci key" {
					t.Errorf("killed event names key %v, want the caller's key name", data["api_key_name"])
				}
			})
		}
	}
}

func TestKillingADeadSandboxChangesNothing(t *testing.T) {
	for _, second := range reason.KillReasons {
		t.Run("a second kill for "+second.String()+" gets the first reason back and records nothing", func(t *testing.T) {
			h := newHarness(t)
			sb := h.create(CreateRequest{})
			if err := h.o.Kill(h.ctx("req-first"), h.team, sb.ID, reason.KillRequest, "key-1"); err != nil {
				t.Fatal(err)
			}
			first := h.waitKilled(sb.ID)
			before := killedCount(second)
			err := h.o.Kill(h.ctx("req-second"), h.team, sb.ID, second, "key-2")
			var gone *GoneError
			if !errors.As(err, &gone) || gone.Reason != reason.KillRequest || gone.ID != sb.ID {
				t.Fatalf("second kill: %v; want a GoneError naming reason request", err)
			}
			if !strings.Contains(err.Error(), "was killed: request at ") {
				t.Errorf("the error %q does not say why and when", err)
			}
			if got := h.record(sb.ID); got.KillReason != first.KillReason || got.KillRequestID != "req-first" || !got.KilledAt.Equal(*first.KilledAt) {
				t.Errorf("the record changed: %+v", got)
			}
			if killedCount(second) != before {
				t.Errorf("the counter for %s grew on a dead sandbox", second)
			}
			if n := len(h.logLines("sandbox killed", sb.ID)); n != 1 {
				t.Errorf("%d kill lines, want 1", n)
			}
		})
	}
}

func TestKillOfAnotherTeamsOrAnUnknownSandboxIsNotFound(t *testing.T) {
	h := newHarness(t)
	sb := h.create(CreateRequest{})
	tests := []struct {
		name, team, id string
	}{
		{"another team's sandbox is not found", "other-team", sb.ID},
		{"an id never created is not found", h.team, "inosuchsandbox000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.o.Kill(h.ctx("req-kill"), tt.team, tt.id, reason.KillRequest, "")
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("kill: %v, want ErrNotFound", err)
			}
		})
	}
	if got := h.record(sb.ID); got.State != store.StateRunning {
		t.Errorf("the sandbox is %s after another team's kill", got.State)
	}
}

func TestAKillReasonOutsideTheSetIsRecordedAsUnknown(t *testing.T) {
	h := newHarness(t)
	sb := h.create(CreateRequest{})
	if err := h.o.Kill(h.ctx("req-kill"), h.team, sb.ID, reason.KillReason("meteor"), ""); err != nil {
		t.Fatal(err)
	}
	h.checkKilled(sb.ID, reason.KillUnknown, "req-kill", "", store.StateRunning)
	if len(h.logLines("kill: reason not in the closed set, recorded as unknown", sb.ID)) != 1 {
		t.Errorf("no warning about the unknown reason:\n%s", h.logs.String())
	}
}

func TestTheKernelEndingASandboxKillsItWithTheReason(t *testing.T) {
	tests := []struct {
		name  string
		state store.SandboxState
		exit  runtime.Exit
		want  reason.KillReason
	}{
		{"envd exiting in a running sandbox kills it for envd_exited", store.StateRunning, runtime.Exit{Code: 2}, reason.KillEnvdExited},
		{"envd exiting in a paused sandbox kills it for envd_exited", store.StatePaused, runtime.Exit{Code: -1, Signal: "killed"}, reason.KillEnvdExited},
		{"envd OOM-killed in a running sandbox kills it for oom", store.StateRunning, runtime.Exit{Code: -1, Signal: "killed", OOMKilled: true}, reason.KillOOM},
		{"envd OOM-killed in a paused sandbox kills it for oom", store.StatePaused, runtime.Exit{Code: -1, Signal: "killed", OOMKilled: true}, reason.KillOOM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			sb := h.create(CreateRequest{})
			if tt.state == store.StatePaused {
				if err := h.o.Pause(h.ctx("req-pause"), h.team, sb.ID); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.rt.exitInit(sb.ID, tt.exit); err != nil {
				t.Fatal(err)
			}
			h.checkKilled(sb.ID, tt.want, SystemRequestID, "", tt.state)
			h.waitFor("the init exit is logged", func() bool { return len(h.logLines("sandbox init exited", sb.ID)) == 1 })
			l := h.logLines("sandbox killed", sb.ID)[0]
			if !strings.Contains(fmt.Sprint(l["detail"]), fmt.Sprintf("envd exited: code %d", tt.exit.Code)) {
				t.Errorf("kill line detail %v does not give the exit", l["detail"])
			}
		})
	}
}

func TestAnOOMKillInsideASandboxIsAnEventAndTheSandboxLives(t *testing.T) {
	h := newHarness(t)
	sb := h.create(CreateRequest{})
	if err := h.rt.oomKill(sb.ID, 1); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the oom event is stored", func() bool {
		for _, ev := range h.events(sb.ID) {
			if ev.Type == string(events.SandboxOOM) {
				return true
			}
		}
		return false
	})
	_, data := h.event(sb.ID, events.SandboxOOM)
	if data["count"] != float64(1) {
		t.Errorf("oom event data %v, want count 1", data)
	}
	h.waitFor("the oom kill is logged", func() bool { return len(h.logLines("sandbox oom kill", sb.ID)) == 1 })
	if l := h.logLines("sandbox oom kill", sb.ID)[0]; l["memory.limit_bytes"] != float64(fakeStats.MemoryLimit) {
		t.Errorf("oom line %v lacks the memory limit", l)
	}
	if got := h.record(sb.ID); got.State != store.StateRunning {
		t.Errorf("the sandbox is %s after an OOM kill inside it", got.State)
	}
}

func TestResumeFailuresKillWithTheirReason(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(h *harness)
		want   reason.KillReason
	}{
		{"a paused sandbox whose template was removed is killed for template_missing", func(h *harness) {
			if err := h.templates.Remove("base"); err != nil {
				h.t.Fatal(err)
			}
		}, reason.KillTemplateMissing},
		{"a paused sandbox that fails to thaw is killed for resume_failed", func(h *harness) {
			h.rt.set(func(f *fakeRuntime) { f.thawErr = errFake })
		}, reason.KillResumeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			sb := h.paused(CreateRequest{})
			tt.break_(h)
			_, err := h.o.Resume(h.ctx("req-resume"), h.team, sb.ID, time.Minute)
			if err == nil {
				t.Fatal("resume succeeded")
			}
			h.checkKilled(sb.ID, tt.want, SystemRequestID, "", store.StatePaused)
		})
	}
}

func TestShutdownKillsEveryLiveSandbox(t *testing.T) {
	h := newHarness(t)
	running := h.create(CreateRequest{})
	paused := h.paused(CreateRequest{})
	dead := h.create(CreateRequest{})
	if err := h.o.Kill(h.ctx("req-kill"), h.team, dead.ID, reason.KillRequest, ""); err != nil {
		t.Fatal(err)
	}
	h.o.Shutdown(context.Background())
	h.checkKilled(running.ID, reason.KillServerShutdown, SystemRequestID, "", store.StateRunning)
	h.checkKilled(paused.ID, reason.KillServerShutdown, SystemRequestID, "", store.StatePaused)
	if got := h.record(dead.ID); got.KillReason != reason.KillRequest {
		t.Errorf("the sandbox killed before shutdown now says %q", got.KillReason)
	}
}
