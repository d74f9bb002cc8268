package orchestrator

import (
	"slices"
	"testing"

	"github.com/cove-dev/cove/internal/envd/envdapi"
	"github.com/cove-dev/cove/internal/store"
)

func TestEachSandboxsEnvdGetsItsTeamsAndTemplatesBudget(t *testing.T) {
	o := &Orchestrator{cfg: Config{EnvdArgs: []string{"--record-head-bytes", "100"}, Collect: envdapi.Budget{BytesPerSec: 1000},
		CollectBudgets: envdapi.Budgets{Templates: map[string]envdapi.Budget{"big": {BytesPerSec: 9000}}}}}
	tests := []struct {
		name     string
		template string
		want     string
	}{
		{"a sandbox of an unlisted template gets the server's budget", "base", "1000"},
		{"a sandbox of a listed template gets the template's", "big", "9000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := o.envdCommand(&store.Sandbox{TeamID: "t", TemplateID: tt.template})
			want := []string{"/.cove/cove", "envd", "--addr", "0.0.0.0:49983", "--record-head-bytes", "100", "--collect-bytes-per-sec", tt.want}
			if !slices.Equal(args, want) {
				t.Errorf("args %q\nwant %q", args, want)
			}
		})
	}
	if len(o.cfg.EnvdArgs) != 2 {
		t.Errorf("the server's args were changed: %q", o.cfg.EnvdArgs)
	}
}
