package reason

import (
	"log/slog"
	"strings"
)

// LogLevel is a log line's level as Cove stores and filters it.
type LogLevel string

// The log levels, least severe first.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// LogLevels lists every LogLevel, least severe first.
var LogLevels = []LogLevel{LevelDebug, LevelInfo, LevelWarn, LevelError}

func (l LogLevel) String() string {
	if l == "" {
		return string(LevelInfo)
	}
	return string(l)
}

// ParseLogLevel returns the LogLevel named s exactly.
func ParseLogLevel(s string) (LogLevel, error) {
	return parse("log level", s, LogLevels)
}

// NormalizeLogLevel is the one reading of a level's common spellings (slog's DEBUG..ERROR
// and DEBUG-4, trace, notice, warning, err, fatal, critical, panic); ok is false for
// anything else, which then reads as info.
func NormalizeLogLevel(s string) (l LogLevel, ok bool) {
	switch v := strings.ToLower(strings.TrimSpace(s)); {
	case strings.HasPrefix(v, "debug"), strings.HasPrefix(v, "trace"):
		return LevelDebug, true
	case strings.HasPrefix(v, "info"), v == "notice":
		return LevelInfo, true
	case strings.HasPrefix(v, "warn"):
		return LevelWarn, true
	case strings.HasPrefix(v, "err"), v == "fatal", v == "panic", v == "critical":
		return LevelError, true
	}
	return LevelInfo, false
}

// SlogLevel is the LogLevel of an slog level.
func SlogLevel(l slog.Level) LogLevel {
	switch {
	case l >= slog.LevelError:
		return LevelError
	case l >= slog.LevelWarn:
		return LevelWarn
	case l >= slog.LevelInfo:
		return LevelInfo
	}
	return LevelDebug
}
