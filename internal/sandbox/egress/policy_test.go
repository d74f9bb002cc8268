package egress_test

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/sandbox/egress"
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    egress.Spec
		wantErr string
	}{
		{"CIDRs, addresses, hostnames and header rules naming secrets and identity tokens are accepted", egress.Spec{
			AllowOut: []string{"10.0.0.0/8", "198.18.7.7", "API.Example.com", "*.example.org"}, DenyOut: []string{"0.0.0.0/0"},
			Rules: map[string][]map[string]string{"web.test": {{"Authorization": "Bearer ${e2b.secrets.openai}", "X-Id": "${e2b.identity.tokens.web}"}}}}, ""},
		{"a malformed CIDR names its entry", egress.Spec{DenyOut: []string{"198.18.7.7", "10.0.0.0/33"}}, "network.denyOut[1]"},
		{"a hostname in denyOut is refused", egress.Spec{DenyOut: []string{"example.com"}}, "hostnames are not supported in denyOut"},
		{"a bare * is refused", egress.Spec{AllowOut: []string{"*"}}, `network.allowOut[0] "*"`},
		{"IPv6 is refused", egress.Spec{AllowOut: []string{"::1"}}, "only IPv4"},
		{"more than 1000 entries are refused", egress.Spec{DenyOut: make([]string, 1001)}, "more than 1000"},
		{"a header value with a placeholder Cove does not resolve is refused", egress.Spec{Rules: map[string][]map[string]string{
			"web.test": {{"Authorization": "Bearer ${e2b.identity.token.web}"}}}}, `network.rules["web.test"][0].transform.headers["Authorization"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := egress.ParsePolicy(tc.spec, true)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(p.AllowOutStrings(), " "); got != "10.0.0.0/8 198.18.7.7/32 api.example.com *.example.org" {
					t.Errorf("allowOut echoed as %q", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
