package orchestrator

import (
	"testing"

	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/store"
)

func TestMetadataValuesThatAreSecretsAreMasked(t *testing.T) {
	o := &Orchestrator{cfg: Config{Redactor: redact.New(redact.Options{Secrets: []string{"admin-token-123"}})}}
	req := CreateRequest{
		EnvVars:  map[string]string{"DB_PASSWORD": "hunter2-db-pass", "GREETING": "hello-there"},
		Metadata: map[string]string{"apiToken": "md-secret-777", "copy": "hunter2-db-pass", "taskId": "t-42", "greeting": "hello-there", "admin": "admin-token-123"},
		Secrets:  []string{"e2b_caller_key_0001"},
	}
	sb := &store.Sandbox{EnvdAccessToken: "access-token-abc"}
	got := redactMetadata(o.sandboxRedactor(sb, req), req.Metadata)
	tests := []struct{ name, key, want string }{
		{"a value under a secret-looking key is masked", "apiToken", "[REDACTED:exact]"},
		{"a value equal to a secret env value is masked", "copy", "[REDACTED:exact]"},
		{"a value equal to a global secret is masked", "admin", "[REDACTED:exact]"},
		{"an ordinary value stays", "taskId", "t-42"},
		{"a value equal to a non-secret env value stays", "greeting", "hello-there"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got[tt.key] != tt.want {
				t.Errorf("metadata[%s] = %q, want %q", tt.key, got[tt.key], tt.want)
			}
		})
	}
	if req.Metadata["apiToken"] != "md-secret-777" {
		t.Error("the caller's map was changed")
	}
}
