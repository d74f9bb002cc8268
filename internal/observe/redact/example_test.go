package redact_test

import (
	"fmt"

	"github.com/cove-dev/cove/internal/observe/redact"
)

func ExampleRedactor_String() {
	global := redact.New(redact.Options{Secrets: []string{"cove_admin_0123456789abcdef"}})
	sandbox := global.With("envd-token-5f0c1e2d")
	line, counts := sandbox.String(`token=envd-token-5f0c1e2d url=https://ann:hunter2@git.example.com tokenizer=bpe`)
	fmt.Println(line)
	fmt.Println(counts)
	// Output:
	// token=[REDACTED:exact] url=https://ann:[REDACTED:url_credentials]@git.example.com tokenizer=bpe
	// exact=1 url_credentials=1
}

func ExampleTruncate() {
	out, omitted := redact.Truncate([]byte("héllo, wörld"), 2, 3)
	fmt.Println(string(out), omitted)
	// Output: h…[10 bytes omitted]…rld 10
}
