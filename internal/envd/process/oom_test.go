package process

import "testing"

func TestParseOOMKills(t *testing.T) {
	tests := []struct {
		name, in string
		want     int64
	}{
		{"the oom_kill line is read", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3},
		{"no oom_kill line is unknown", "oom_kill_disable 0\nunder_oom 0\n", -1},
		{"garbage is unknown", "oom_kill x\n", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseOOMKills([]byte(tt.in)); got != tt.want {
				t.Errorf("parseOOMKills = %d, want %d", got, tt.want)
			}
		})
	}
}
