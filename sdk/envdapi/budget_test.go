package envdapi

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestBudgetsPickTemplateOverTeamOverServer(t *testing.T) {
	bs, err := ParseBudgets(strings.NewReader(`{"teams":{"t1":{"bytes_per_sec":2048,"command_bytes":100}},"templates":{"big":{"bytes_per_sec":4096}}}`))
	if err != nil {
		t.Fatal(err)
	}
	base := Budget{LinesPerSec: 10, BytesPerSec: 1024, ByteBurst: 8192}
	tests := []struct {
		name           string
		team, template string
		want           []string
	}{
		{"a sandbox of no listed team or template gets the server's budget", "t9", "base",
			[]string{"--collect-lines-per-sec", "10", "--collect-bytes-per-sec", "1024", "--collect-byte-burst", "8192"}},
		{"a team's fields replace the server's", "t1", "base",
			[]string{"--collect-lines-per-sec", "10", "--collect-bytes-per-sec", "2048", "--collect-byte-burst", "8192", "--collect-command-bytes", "100"}},
		{"a template's fields replace its team's", "t1", "big",
			[]string{"--collect-lines-per-sec", "10", "--collect-bytes-per-sec", "4096", "--collect-byte-burst", "8192", "--collect-command-bytes", "100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bs.For(base, tt.team, tt.template).Args(); !slices.Equal(got, tt.want) {
				t.Errorf("args %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestParseBudgetsNamesWhatIsWrong(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"a negative value names its field", `{"teams":{"t1":{"byte_burst":-1}}}`, "teams.t1.byte_burst"},
		{"an unknown field is named", `{"teams":{"t1":{"bytes_per_second":1}}}`, "bytes_per_second"},
		{"an unknown section is named", `{"sandboxes":{}}`, "sandboxes"},
		{"a second document is an error", `{} {}`, "more than one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseBudgets(strings.NewReader(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestATeamCanSwitchCollectionOff(t *testing.T) {
	bs, err := ParseBudgets(strings.NewReader(`{"teams":{"quiet":{"collect":false}},"templates":{"loud":{"collect":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, team, template string
		want                 string
	}{
		{"the team's switch applies to its sandboxes", "quiet", "base", "false"},
		{"a template's switch wins over the team's", "quiet", "loud", "true"},
		{"an unlisted team leaves it unset", "other", "base", "<nil>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := bs.For(Budget{}, tt.team, tt.template).Collect
			got := "<nil>"
			if c != nil {
				got = strconv.FormatBool(*c)
			}
			if got != tt.want {
				t.Errorf("collect %s, want %s", got, tt.want)
			}
			if args := bs.For(Budget{}, tt.team, tt.template).Args(); len(args) != 0 {
				t.Errorf("the switch became envd flags: %v", args)
			}
		})
	}
}
