package api_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// TestTheSDKsCreateIsDecodedFieldForField sends the Go SDK's create (its NewSandbox, the type
// the server decodes) and checks what reached the orchestrator, option by option.
func TestTheSDKsCreateIsDecodedFieldForField(t *testing.T) {
	t.Parallel()
	type request struct {
		Template                              string
		Secure, AutoPause, AutoResume, Online bool
		Timeout                               time.Duration
		Metadata, EnvVars                     map[string]string
		Mounts                                int
	}
	tests := []struct {
		name string
		opts cove.SandboxOptions
		want request
	}{
		{"every option arrives", cove.SandboxOptions{
			Template: "py", Timeout: 90 * time.Second, Metadata: map[string]string{"task": "t-1"},
			EnvVars: map[string]string{"A": "1"}, AutoPause: true, AutoResume: true, NoInternet: true,
			VolumeMounts: []cove.VolumeMount{{Name: "data", Path: "/data"}},
		}, request{Template: "py", Secure: true, AutoPause: true, AutoResume: true, Timeout: 90 * time.Second,
			Metadata: map[string]string{"task": "t-1"}, EnvVars: map[string]string{"A": "1"}, Mounts: 1}},
		{"the zero options make a secure base sandbox with internet and the default timeout", cove.SandboxOptions{},
			request{Template: "base", Secure: true, Online: true}},
		{"an insecure sandbox is asked for as such", cove.SandboxOptions{Insecure: true},
			request{Template: "base", Online: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			c := cove.NewClient(cove.Config{APIURL: e.url, APIKey: testKey})
			if _, err := c.Create(context.Background(), tt.opts); err != nil {
				t.Fatalf("create: %v", err)
			}
			e.fake.mu.Lock()
			defer e.fake.mu.Unlock()
			if len(e.fake.created) != 1 {
				t.Fatalf("%d creates reached the orchestrator", len(e.fake.created))
			}
			r := e.fake.created[0]
			got := request{Template: r.TemplateID, Secure: r.Secure, AutoPause: r.AutoPause, AutoResume: r.AutoResume,
				Online: r.AllowInternet, Timeout: r.Timeout, Metadata: r.Metadata, EnvVars: r.EnvVars, Mounts: len(r.VolumeMounts)}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("the orchestrator got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
