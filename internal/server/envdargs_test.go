package server

import (
	"slices"
	"testing"
)

func TestEnvdArgsPassTheCollectionBudgetsOn(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"an unset budget leaves envd its default", Config{}, nil},
		{"every set budget becomes envd's flag", Config{RecordHeadBytes: 100, CollectBytesPerSec: 2048, CollectByteBurst: 4096, CollectCommandBytes: 8192},
			[]string{"--record-head-bytes", "100", "--collect-bytes-per-sec", "2048", "--collect-byte-burst", "4096", "--collect-command-bytes", "8192"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envdArgs(tt.cfg); !slices.Equal(got, tt.want) {
				t.Errorf("envdArgs = %q, want %q", got, tt.want)
			}
		})
	}
}
