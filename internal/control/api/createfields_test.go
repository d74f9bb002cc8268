package api_test

import (
	"strings"
	"testing"
)

// TestCreateRefusesMisspelledFields: a create field Cove would silently ignore because it is
// spelled otherwise, or sits outside the network object, is a 400 naming it, and nothing is
// created; E2B's own spelling is honoured.
func TestCreateRefusesMisspelledFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		status     int
		message    string // in the 400's message
		online     bool   // the created sandbox's internet access
	}{
		{name: "camelCase allowInternetAccess is 400 naming E2B's spelling", body: `{"templateID":"base","allowInternetAccess":false}`,
			status: 400, message: `unknown field "allowInternetAccess": the create body spells it "allow_internet_access"`},
		{name: "a dashed allow-internet-access is 400", body: `{"templateID":"base","allow-internet-access":false}`,
			status: 400, message: `"allow-internet-access"`},
		{name: "template_id is 400 naming templateID", body: `{"template_id":"base"}`,
			status: 400, message: `the create body spells it "templateID"`},
		{name: "allowPublicTraffic at the top level is 400 pointing into network", body: `{"templateID":"base","allowPublicTraffic":false}`,
			status: 400, message: "network.allowPublicTraffic"},
		{name: "an unknown field inside network is 400 naming it", body: `{"templateID":"base","network":{"allowInternetAccess":false}}`,
			status: 400, message: `unknown field "allowInternetAccess"`},
		{name: "E2B's allow_internet_access false cuts the internet", body: `{"templateID":"base","allow_internet_access":false}`,
			status: 201},
		{name: "a field that differs only in case is read as before", body: `{"TemplateID":"base"}`, status: 201, online: true},
		{name: "a field Cove does not know at all is ignored", body: `{"templateID":"base","mcp":{"x":1}}`, status: 201, online: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, "POST", "/sandboxes", tt.body)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d: %s", res.status, tt.status, res.body)
			}
			e.fake.mu.Lock()
			defer e.fake.mu.Unlock()
			if tt.status != 201 {
				if msg, _ := res.json(t)["message"].(string); !strings.Contains(msg, tt.message) {
					t.Errorf("message %q, want %q", msg, tt.message)
				}
				if len(e.fake.created) != 0 {
					t.Errorf("%d sandboxes created by a refused create", len(e.fake.created))
				}
				return
			}
			if len(e.fake.created) != 1 || e.fake.created[0].AllowInternet != tt.online || e.fake.created[0].TemplateID != "base" {
				t.Errorf("created %+v, want one base sandbox with internet %v", e.fake.created, tt.online)
			}
		})
	}
}
