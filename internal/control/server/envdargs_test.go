package server

import (
	"slices"
	"testing"
)

func TestEnvdArgsPassTheRecordCapsOn(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"unset caps leave envd its defaults", Config{}, nil},
		{"every set cap becomes envd's flag", Config{RecordHeadBytes: 100, RecordTailBytes: 200},
			[]string{"--record-head-bytes", "100", "--record-tail-bytes", "200"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envdArgs(tt.cfg); !slices.Equal(got, tt.want) {
				t.Errorf("envdArgs = %q, want %q", got, tt.want)
			}
		})
	}
}
