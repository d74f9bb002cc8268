package cove

import (
	"encoding/json"
	"testing"
)

func TestAnEventsDataDecodesIntoItsTypesPayload(t *testing.T) {
	tests := []struct {
		name  string
		event SandboxEvent
		check func(t *testing.T, v any)
	}{
		{"a killed event gives its reason, post-mortem and key", SandboxEvent{Type: EventSandboxKilled,
			EventData: json.RawMessage(`{"kill_reason":"oom","api_key_name":"ci","execution":{"execution_time":1500},"postmortem":{"processes":[{"pid":7,"command":"python3"}],"resources":{"oom_kills":1}}}`)},
			func(t *testing.T, v any) {
				d, ok := v.(*KilledEventData)
				if !ok || d.KillReason != "oom" || d.APIKeyName != "ci" || d.Execution.ExecutionTimeMS != 1500 ||
					len(d.Postmortem.Processes) != 1 || d.Postmortem.Resources.OOMKills != 1 {
					t.Errorf("%#v", v)
				}
			}},
		{"an oom event gives its count", SandboxEvent{Type: EventSandboxOOM, EventData: json.RawMessage(`{"count":3}`)},
			func(t *testing.T, v any) {
				if d, ok := v.(*OOMEventData); !ok || d.Count != 3 {
					t.Errorf("%#v", v)
				}
			}},
		{"an event without data gives an empty payload", SandboxEvent{Type: EventSandboxCreated},
			func(t *testing.T, v any) {
				if _, ok := v.(*CreatedEventData); !ok {
					t.Errorf("%#v", v)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.event.Data()
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, v)
		})
	}
	if _, err := (SandboxEvent{Type: "sandbox.lifecycle.exploded"}).Data(); err == nil {
		t.Error("an unknown type decoded")
	}
	if _, err := (SandboxEvent{Type: EventSandboxOOM, EventData: json.RawMessage(`{"count":"x"}`)}).Data(); err == nil {
		t.Error("a malformed payload decoded")
	}
}
