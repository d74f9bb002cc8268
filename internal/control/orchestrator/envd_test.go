package orchestrator

import (
	"slices"
	"strconv"
	"testing"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
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

func TestCollectionIsSwitchedPerSandboxTemplateAndTeam(t *testing.T) {
	off, on := false, true
	o := &Orchestrator{cfg: Config{CollectBudgets: envdapi.Budgets{
		Teams:     map[string]envdapi.Budget{"quiet": {Collect: &off}},
		Templates: map[string]envdapi.Budget{"loud": {Collect: &on}},
	}}}
	tests := []struct {
		name           string
		team, template string
		own, tmpl      *bool
		want           string
	}{
		{"a sandbox of an unlisted team keeps envd's default", "t", "base", nil, nil, "default"},
		{"a team switched off in --collect-budgets collects nothing", "quiet", "base", nil, nil, "false"},
		{"a template listed on wins over its team", "quiet", "loud", nil, nil, "true"},
		{"the template's own setting wins over the budgets file", "quiet", "base", nil, &on, "true"},
		{"the sandbox's collectLogs wins over everything", "t", "loud", &off, &on, "false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := "default"
			if c := o.collectOutput(&store.Sandbox{TeamID: tt.team, TemplateID: tt.template}, tt.own, tt.tmpl); c != nil {
				got = strconv.FormatBool(*c)
			}
			if got != tt.want {
				t.Errorf("collect = %s, want %s", got, tt.want)
			}
		})
	}
}
