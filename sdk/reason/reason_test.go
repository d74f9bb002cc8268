package reason

import (
	"log/slog"
	"testing"
)

func TestClosedSetsRoundTripAndRejectUnknownValues(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, name string, all []string, parse func(string) (string, error)) {
		t.Run(name+" values parse back to themselves", func(t *testing.T) {
			for _, v := range all {
				got, err := parse(v)
				if err != nil || got != v {
					t.Errorf("parse(%q) = %q, %v", v, got, err)
				}
			}
		})
		t.Run(name+" rejects an unknown value", func(t *testing.T) {
			if _, err := parse("no-such-value"); err == nil {
				t.Error("accepted an unknown value")
			}
		})
	}
	check(t, "kill reason", strs(KillReasons), func(s string) (string, error) { v, err := ParseKillReason(s); return string(v), err })
	check(t, "cancel cause", strs(CancelCauses), func(s string) (string, error) { v, err := ParseCancelCause(s); return string(v), err })
	check(t, "stream end", strs(StreamEnds), func(s string) (string, error) { v, err := ParseStreamEnd(s); return string(v), err })
	check(t, "stream phase", strs(StreamPhases), func(s string) (string, error) { v, err := ParseStreamPhase(s); return string(v), err })
	check(t, "log level", strs(LogLevels), func(s string) (string, error) { v, err := ParseLogLevel(s); return string(v), err })
	check(t, "end cause", strs(EndCauses), func(s string) (string, error) { v, err := ParseEndCause(s); return string(v), err })
	check(t, "list order", []string{"asc", "desc"}, func(s string) (string, error) { v, err := ParseListOrder(s); return string(v), err })
}

func TestARunningCommandHasNoEndCause(t *testing.T) {
	if c, err := ParseEndCause(""); err != nil || c != "" || c.String() != "running" {
		t.Errorf("ParseEndCause(\"\") = %q (%s), %v; want the empty cause, read as running", c, c, err)
	}
}

func TestRejectedIsAStreamEnd(t *testing.T) {
	if e, err := ParseStreamEnd("rejected"); err != nil || e != StreamRejected {
		t.Errorf("ParseStreamEnd(rejected) = %q, %v", e, err)
	}
}

func TestOneReadingOfLevelSpellings(t *testing.T) {
	tests := []struct {
		in     string
		want   LogLevel
		wantOK bool
	}{
		{"DEBUG", LevelDebug, true}, {"DEBUG-4", LevelDebug, true}, {"trace", LevelDebug, true},
		{"INFO", LevelInfo, true}, {"notice", LevelInfo, true},
		{"WARN", LevelWarn, true}, {"warning", LevelWarn, true},
		{"ERROR", LevelError, true}, {"err", LevelError, true}, {"fatal", LevelError, true}, {"panic", LevelError, true}, {"critical", LevelError, true},
		{"chatty", LevelInfo, false}, {"", LevelInfo, false},
	}
	for _, tt := range tests {
		t.Run("level "+tt.in+" reads as "+tt.want.String(), func(t *testing.T) {
			if got, ok := NormalizeLogLevel(tt.in); got != tt.want || ok != tt.wantOK {
				t.Errorf("NormalizeLogLevel(%q) = %q, %v", tt.in, got, ok)
			}
		})
	}
	for l, want := range map[slog.Level]LogLevel{slog.LevelDebug: LevelDebug, slog.LevelInfo: LevelInfo, slog.LevelWarn + 1: LevelWarn, slog.LevelError + 4: LevelError} {
		if got := SlogLevel(l); got != want {
			t.Errorf("SlogLevel(%v) = %q, want %q", l, got, want)
		}
	}
}

func TestEmptyValuesReadAsADefinedMember(t *testing.T) {
	t.Parallel()
	if got := KillReason("").String(); got != "unknown" {
		t.Errorf(`empty kill reason reads %q, want "unknown"`, got)
	}
	if k, err := ParseKillReason(""); err != nil || k != KillUnknown {
		t.Errorf(`ParseKillReason("") = %q, %v`, k, err)
	}
	for _, s := range []interface{ String() string }{CancelCause(""), StreamEnd(""), StreamPhase(""), LogLevel(""), ListOrder("")} {
		if s.String() == "" {
			t.Errorf("%T zero value reads as empty", s)
		}
	}
}

func strs[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}
