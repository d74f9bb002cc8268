package logs

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// ParseJSONLine reads one of envd's JSON log lines (log/slog's JSON shape) into a LogLine
// from the sandbox: Time from "time", Level from "level", Message from "msg", RequestID from
// "request_id", PID from "process.pid", and every other key into Fields. ok is false when
// b is not a JSON object; the caller then keeps the text as the message. The caller sets
// the sandbox, team, template and source, which a line never chooses for itself.
func ParseJSONLine(b []byte) (l store.LogLine, ok bool) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return l, false
	}
	if s, ok := m[slog.TimeKey].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			l.Time = t.UTC()
			delete(m, slog.TimeKey)
		}
	}
	if s, ok := m[slog.LevelKey].(string); ok {
		l.Level = NormalizeLevel(s)
		delete(m, slog.LevelKey)
	}
	if s, ok := m[slog.MessageKey].(string); ok {
		l.Message = s
		delete(m, slog.MessageKey)
	}
	if s, ok := m[telemetry.KeyRequestID].(string); ok {
		l.RequestID = s
		delete(m, telemetry.KeyRequestID)
	}
	if f, ok := m[telemetry.KeyPID].(float64); ok {
		l.PID = int(f)
		delete(m, telemetry.KeyPID)
	}
	if len(m) > 0 {
		l.Fields = m
	}
	return l, true
}

// NormalizeLevel maps a level's common spellings (slog's DEBUG..ERROR, warning, fatal)
// to store.LogLevels; anything else is info (reason.NormalizeLogLevel, the one reading).
func NormalizeLevel(s string) string {
	l, _ := reason.NormalizeLogLevel(s)
	return l.String()
}
