package redact

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestLooksSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{"GITHUB_TOKEN", true},
		{"access_token", true},
		{"accessToken", true},
		{"AWS_SECRET_ACCESS_KEY", true},
		{"client_secret", true},
		{"DB_PASSWORD", true},
		{"MYSQL_ROOT_PASSWD", true},
		{"password", true},
		{"GPG_PASSPHRASE", true},
		{"OPENAI_API_KEY", true},
		{"x-api-key", true},
		{"apiKey", true},
		{"SSH_PRIVATE_KEY", true},
		{"GOOGLE_APPLICATION_CREDENTIALS", true},
		{"credentials", true},
		{"Authorization", true},
		{"NPM_AUTH_TOKEN", true},
		{"auth", true},
		{"oauth_refresh", true},
		{"DB_PWD", true},
		{"TOKENIZERS_PARALLELISM", false},
		{"tokenizer", false},
		{"max_tokens", false},
		{"author", false},
		{"GIT_AUTHOR_NAME", false},
		{"authority", false},
		{"passport", false},
		{"monkey", false},
		{"key", false},
		{"AWS_ACCESS_KEY_ID", false},
		{"PWD", false},
		{"OLDPWD", false},
		{"PATH", false},
		{"HOME", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q looks secret is %v", tt.name, tt.want), func(t *testing.T) {
			if got := LooksSecret(tt.name); got != tt.want {
				t.Errorf("LooksSecret(%q) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	const (
		jwt    = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
		e2bKey = "e2b_0123456789abcdef0123456789abcdef01234567"
	)
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
		counts  Counts
	}{
		{
			name: "text without secrets comes back unchanged",
			in:   `{"level":"INFO","msg":"sandbox killed","sandbox_id":"ix8kq2","author":"ann"}`,
			want: `{"level":"INFO","msg":"sandbox killed","sandbox_id":"ix8kq2","author":"ann"}`,
		},
		{
			name:    "an exact secret is masked everywhere",
			secrets: []string{"s3cr3t-value"},
			in:      "a s3cr3t-value b s3cr3t-value",
			want:    "a [REDACTED:exact] b [REDACTED:exact]",
			counts:  Counts{Exact: 2},
		},
		{
			name:    "a secret shorter than the minimum is not masked",
			secrets: []string{"abc"},
			in:      "abc abcdef",
			want:    "abc abcdef",
		},
		{
			name:    "overlapping secrets become one mask",
			secrets: []string{"abcdefgh", "efghijkl"},
			in:      "xx abcdefghijkl yy",
			want:    "xx [REDACTED:exact] yy",
			counts:  Counts{Exact: 1},
		},
		{
			name:    "an exact secret inside a secret-looking value is masked once",
			secrets: []string{"hunter2hunter2"},
			in:      "DB_PASSWORD=hunter2hunter2",
			want:    "DB_PASSWORD=[REDACTED:exact]",
			counts:  Counts{Exact: 1},
		},
		{
			name:   "a bearer header keeps the scheme",
			in:     "> Authorization: Bearer abc.DEF-123_xyz",
			want:   "> Authorization: Bearer [REDACTED:bearer]",
			counts: Counts{Bearer: 1},
		},
		{
			name:   "a lower-case bearer token is masked",
			in:     "sent bearer 9f8e7d6c5b4a3f2e1d0c",
			want:   "sent bearer [REDACTED:bearer]",
			counts: Counts{Bearer: 1},
		},
		{
			name: "bearer in prose is left alone",
			in:   "use a bearer token, see bearer authentication",
			want: "use a bearer token, see bearer authentication",
		},
		{
			name:   "a basic authorization header masks the credential",
			in:     "Authorization: Basic dXNlcjpwYXNzd29yZA==",
			want:   "Authorization: Basic [REDACTED:key_value]",
			counts: Counts{KeyValue: 1},
		},
		{
			name:   "a URL password is masked and the user kept",
			in:     "postgres://app:p4ss@db.internal:5432/app",
			want:   "postgres://app:[REDACTED:url_credentials]@db.internal:5432/app",
			counts: Counts{URLCredentials: 1},
		},
		{
			name:   "a token used as the URL user is masked",
			in:     "git clone https://ghx_0123456789abcdefABCDEF@github.com/o/r.git",
			want:   "git clone https://[REDACTED:url_credentials]@github.com/o/r.git",
			counts: Counts{URLCredentials: 1},
		},
		{
			name: "an ssh URL user is not a secret",
			in:   "ssh://git@github.com/o/r.git and mailto:ann@example.com",
			want: "ssh://git@github.com/o/r.git and mailto:ann@example.com",
		},
		{
			name:   "an AWS access key id is masked",
			in:     "key AKIAIOSFODNN7EXAMPLE used",
			want:   "key [REDACTED:aws_key] used",
			counts: Counts{AWSKey: 1},
		},
		{
			name:   "an AWS secret access key value is masked",
			in:     "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			want:   "aws_secret_access_key = [REDACTED:aws_key]",
			counts: Counts{AWSKey: 1},
		},
		{
			name:   "a whole PEM private key block is masked",
			in:     "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK==\n-----END RSA PRIVATE KEY-----\nafter",
			want:   "before\n[REDACTED:private_key]\nafter",
			counts: Counts{PrivateKey: 1},
		},
		{
			name: "a PEM certificate is not a secret",
			in:   "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
			want: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
		},
		{
			name:   "a PEM private key cut short is masked to the end",
			in:     "key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk",
			want:   "key: [REDACTED:private_key]",
			counts: Counts{PrivateKey: 1},
		},
		{
			name:   "a JWT is masked",
			in:     "jwt=" + jwt + " ok",
			want:   "jwt=[REDACTED:jwt] ok",
			counts: Counts{JWT: 1},
		},
		{
			name:   "an E2B API key is masked whole",
			in:     "X-API-Key " + e2bKey,
			want:   "X-API-Key [REDACTED:api_key]",
			counts: Counts{APIKey: 1},
		},
		{
			name:   "the Cove admin token is masked whole",
			in:     "admin cove_admin_0123456789abcdef0123456789abcdef0123456789abcdef",
			want:   "admin [REDACTED:api_key]",
			counts: Counts{APIKey: 1},
		},
		{
			name:   "a JSON password is masked and its quotes kept",
			in:     `{"user":"ann","password": "correct horse","port":5432}`,
			want:   `{"user":"ann","password": "[REDACTED:key_value]","port":5432}`,
			counts: Counts{KeyValue: 1},
		},
		{
			name:   "an escaped JSON secret inside a JSON string is masked",
			in:     `{"msg":"body {\"client_secret\":\"abc123xyz\"}"}`,
			want:   `{"msg":"body {\"client_secret\":\"[REDACTED:key_value]\"}"}`,
			counts: Counts{KeyValue: 1},
		},
		{
			name:   "a query string token is masked up to the next parameter",
			in:     "GET /cb?access_token=qwerty123&state=ok",
			want:   "GET /cb?access_token=[REDACTED:key_value]&state=ok",
			counts: Counts{KeyValue: 1},
		},
		{
			name: "keys that only look alike keep their values",
			in:   "monkey=banana tokenizer=bpe author: Ann passport=P123456 max_tokens=512 key=short",
			want: "monkey=banana tokenizer=bpe author: Ann passport=P123456 max_tokens=512 key=short",
		},
		{
			name: "null and object values are kept",
			in:   `{"token": null, "auth": {"type": "oauth"}}`,
			want: `{"token": null, "auth": {"type": "oauth"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := New(Options{Secrets: tt.secrets})
			got, counts := r.String(tt.in)
			if got != tt.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if counts != tt.counts {
				t.Errorf("counts = %v, want %v", counts, tt.counts)
			}
			gotB, countsB := r.Bytes([]byte(tt.in))
			if string(gotB) != got || countsB != counts {
				t.Errorf("Bytes = %q %v, String = %q %v", gotB, countsB, got, counts)
			}
		})
	}
}

// plantedLine is a realistic log line with the secrets planted in it and words that must
// survive.
type plantedLine struct {
	name    string
	line    string
	planted []string
	keep    []string
}

var plantedCorpus = []plantedLine{
	{
		name:    "a JSON log line",
		line:    `{"time":"2025-01-02T10:00:00Z","level":"INFO","msg":"envd call","sandbox_id":"ix8kq2","access_token":"tok_9d8c7b6a5f4e3d2c","tokenizer":"bpe"}`,
		planted: []string{"tok_9d8c7b6a5f4e3d2c"},
		keep:    []string{`"tokenizer":"bpe"`, `"msg":"envd call"`, `"time":"2025-01-02T10:00:00Z"`},
	},
	{
		name:    "shell output exporting a token",
		line:    "$ export GITHUB_TOKEN=ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5\n$ echo done\ndone",
		planted: []string{"ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5", "aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"},
		keep:    []string{"export GITHUB_TOKEN=", "$ echo done\ndone"},
	},
	{
		name: "an env dump",
		line: "PATH=/usr/local/bin:/usr/bin\nHOME=/home/user\nPWD=/home/user/work\nOPENAI_API_KEY=sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3\n" +
			"DB_PASSWORD=Tr0ub4dor&3\nTOKENIZERS_PARALLELISM=false\nAWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n" +
			"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nLANG=en_US.UTF-8\nmonkey=banana",
		planted: []string{"sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3", "Tr0ub4dor", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
		keep: []string{"PATH=/usr/local/bin:/usr/bin", "HOME=/home/user", "PWD=/home/user/work", "TOKENIZERS_PARALLELISM=false",
			"LANG=en_US.UTF-8", "monkey=banana"},
	},
	{
		name: "curl -v output",
		line: "*   Trying 10.0.0.5:443...\n> GET /v1/sandboxes HTTP/2\n> Host: api.example.com\n> Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbm4ifQ.c2lnbmF0dXJlLXNpZw\n" +
			"> X-API-Key: e2b_4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c\n> User-Agent: curl/8.5.0\n< HTTP/2 200",
		planted: []string{"eyJhbGciOiJSUzI1NiJ9", "c2lnbmF0dXJlLXNpZw", "e2b_4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c", "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c"},
		keep:    []string{"> Host: api.example.com", "> User-Agent: curl/8.5.0", "> Authorization: Bearer ", "Trying 10.0.0.5:443..."},
	},
	{
		name:    "git remote URLs with tokens",
		line:    "origin\thttps://x-access-token:ghs_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8@github.com/cove-dev/cove.git (fetch)\nupstream\thttps://oauth2:glpat-Ab1Cd2Ef3Gh4Ij5Kl6Mn@gitlab.com/g/p.git (push)",
		planted: []string{"ghs_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8", "glpat-Ab1Cd2Ef3Gh4Ij5Kl6Mn"},
		keep:    []string{"https://x-access-token:", "@github.com/cove-dev/cove.git (fetch)", "https://oauth2:", "@gitlab.com/g/p.git (push)"},
	},
	{
		name:    "a PEM key in a file dump",
		line:    "$ cat id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBxNXkQ7gS2\n-----END OPENSSH PRIVATE KEY-----\n$ ls",
		planted: []string{"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW", "QyNTUxOQAAACBxNXkQ7gS2"},
		keep:    []string{"$ cat id_ed25519\n", "\n$ ls"},
	},
	{
		name:    "an AWS credentials file",
		line:    "[default]\naws_access_key_id = ASIAY34FZKBOKMUTVV7A\naws_secret_access_key = 9drTJvcXLB89EXAMPLELB8923FB892xMFI\naws_session_token = IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJH\nregion = us-east-1",
		planted: []string{"ASIAY34FZKBOKMUTVV7A", "9drTJvcXLB89EXAMPLELB8923FB892xMFI", "IQoJb3JpZ2luX2VjEJr"},
		keep:    []string{"[default]", "region = us-east-1", "aws_session_token = "},
	},
	{
		name:    "a JSON config with a password",
		line:    `{"database": {"host": "db", "user": "app", "password": "pa55-w0rd!", "passport_check": true}, "author": "Ann Author", "api_key": "k_77aa88bb99cc"}`,
		planted: []string{"pa55-w0rd!", "k_77aa88bb99cc"},
		keep:    []string{`"host": "db"`, `"user": "app"`, `"passport_check": true`, `"author": "Ann Author"`},
	},
	{
		name:    "a connection string in an error",
		line:    `level=ERROR msg="connect failed" dsn="mysql://root:Sup3rS3cret@tcp(10.0.0.2:3306)/cove" err="dial tcp: i/o timeout"`,
		planted: []string{"Sup3rS3cret"},
		keep:    []string{`msg="connect failed"`, `err="dial tcp: i/o timeout"`, "mysql://root:"},
	},
	{
		name:    "known exact secrets in free text",
		line:    "envd started with token 5f0c1e2d3b4a59687766554433221100 for sandbox ix8kq2; the author tokenizer passport stay",
		planted: []string{"5f0c1e2d3b4a59687766554433221100"},
		keep:    []string{"envd started with token ", "for sandbox ix8kq2; the author tokenizer passport stay"},
	},
}

func TestPlantedSecrets(t *testing.T) {
	t.Parallel()
	// Cove knows the envd token exactly; everything else must be caught by patterns.
	r := New(Options{Secrets: []string{"5f0c1e2d3b4a59687766554433221100"}})
	for _, tt := range plantedCorpus {
		t.Run(tt.name+" loses every planted secret and keeps the rest", func(t *testing.T) {
			t.Parallel()
			got, counts := r.String(tt.line)
			for _, p := range tt.planted {
				if strings.Contains(got, p) {
					t.Errorf("planted secret %q survived in\n%s", p, got)
				}
			}
			for _, k := range tt.keep {
				if !strings.Contains(got, k) {
					t.Errorf("text %q was lost from\n%s", k, got)
				}
			}
			if counts.Total() == 0 {
				t.Errorf("no counts for\n%s", got)
			}
		})
	}
}

func TestUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{
			name:    "multi-byte text around a secret is kept",
			secrets: []string{"ключ-секрет"},
			in:      "日本語 ключ-секрет 🎉",
			want:    "日本語 [REDACTED:exact] 🎉",
		},
		{
			name:    "a secret that starts inside a multi-byte sequence masks the whole rune",
			secrets: []string{"\x82\xacabcdef"},
			in:      "x€abcdefy",
			want:    "x[REDACTED:exact]y",
		},
		{
			name:    "a secret that ends inside a multi-byte sequence masks the whole rune",
			secrets: []string{"abcdef\xf0\x9f"},
			in:      "abcdef🎉z",
			want:    "[REDACTED:exact]z",
		},
		{
			name:    "an invalid UTF-8 secret in invalid input is masked by bytes",
			secrets: []string{"\xff\xfe\xfdsecret"},
			in:      "a\xff\xfe\xfdsecret\xc3b",
			want:    "a[REDACTED:exact]\xc3b",
		},
		{
			name: "a multi-byte password value is masked whole",
			in:   "password=пароль123 next",
			want: "password=[REDACTED:key_value] next",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, _ := New(Options{Secrets: tt.secrets}).String(tt.in)
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if utf8.ValidString(tt.in) && !utf8.ValidString(got) {
				t.Errorf("valid input gave invalid output %q", got)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         string
		head, tail int
		want       string
		omitted    int
	}{
		{"text that fits is returned as is", "hello", 3, 2, "hello", 0},
		{"ASCII keeps head and tail", "0123456789", 3, 2, "012…[5 bytes omitted]…89", 5},
		{"a head cut inside a rune drops the rune", "ab€cd", 3, 1, "ab…[4 bytes omitted]…d", 4},
		{"a tail cut inside a rune drops the rune", "ab€cd", 1, 4, "a…[4 bytes omitted]…cd", 4},
		{"zero head and tail keep only the marker", "abc", 0, 0, "…[3 bytes omitted]…", 3},
		{"negative caps count as zero", "abc", -1, -5, "…[3 bytes omitted]…", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, omitted := Truncate([]byte(tt.in), tt.head, tt.tail)
			if string(got) != tt.want || omitted != tt.omitted {
				t.Errorf("Truncate(%q, %d, %d) = %q, %d; want %q, %d", tt.in, tt.head, tt.tail, got, omitted, tt.want, tt.omitted)
			}
		})
	}
}

func TestTruncateEveryBoundary(t *testing.T) {
	t.Parallel()
	in := []byte("a🎉bé€x日🙂z𝄞")
	for head := 0; head <= len(in)+1; head++ {
		for tail := 0; tail <= len(in)+1; tail++ {
			out, omitted := Truncate(in, head, tail)
			if !utf8.Valid(out) {
				t.Fatalf("Truncate(head=%d, tail=%d) = %q, invalid UTF-8", head, tail, out)
			}
			if omitted == 0 {
				if string(out) != string(in) {
					t.Fatalf("Truncate(head=%d, tail=%d) = %q with nothing omitted", head, tail, out)
				}
				continue
			}
			marker := fmt.Sprintf("…[%d bytes omitted]…", omitted)
			h, tl, ok := strings.Cut(string(out), marker)
			if !ok || len(h) > head || len(tl) > tail || len(h)+len(tl)+omitted != len(in) ||
				!strings.HasPrefix(string(in), h) || !strings.HasSuffix(string(in), tl) {
				t.Fatalf("Truncate(head=%d, tail=%d) = %q, omitted %d", head, tail, out, omitted)
			}
		}
	}
}

func TestWith(t *testing.T) {
	t.Parallel()
	global := New(Options{Secrets: []string{"global-secret"}})
	sandbox := global.With("sandbox-secret", "x")
	global.AddSecret("added-later")

	got, c := sandbox.String("global-secret sandbox-secret added-later x")
	if want := "[REDACTED:exact] [REDACTED:exact] [REDACTED:exact] x"; got != want || c.Exact != 3 {
		t.Errorf("sandbox String = %q %v, want %q", got, c, want)
	}
	if got, _ := global.String("sandbox-secret"); got != "sandbox-secret" {
		t.Errorf("global masked a sandbox secret: %q", got)
	}
	if sandbox.Skipped() != 1 || sandbox.Len() != 3 || global.Len() != 2 {
		t.Errorf("Skipped = %d, Len = %d/%d; want 1, 3/2", sandbox.Skipped(), sandbox.Len(), global.Len())
	}
	var nilR *Redactor
	if got, _ := nilR.String("Authorization: Bearer abc123def456"); got != "Authorization: Bearer [REDACTED:bearer]" {
		t.Errorf("nil Redactor = %q", got)
	}
}

func TestConcurrentAddAndRedact(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				r.AddSecret(fmt.Sprintf("secret-%d-%04d", g, i))
			}
		})
		wg.Go(func() {
			for i := range 200 {
				if got, _ := r.String("line secret-0-0000 " + fmt.Sprint(i)); strings.Contains(got, "secret-0-0000") && r.Len() > 800 {
					t.Errorf("secret survived after it was added: %q", got)
				}
			}
		})
	}
	wg.Wait()
	if r.Len() != 800 {
		t.Errorf("Len = %d, want 800", r.Len())
	}
}

func TestAutomatonAgreesWithIndex(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab€\xff"
	randString := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 500 {
		var secrets []string
		for range 1 + rng.IntN(40) {
			secrets = append(secrets, randString(1+rng.IntN(6)))
		}
		text := randString(rng.IntN(200))
		want := coverage(len(text), findEach(text, secrets, nil))
		got := coverage(len(text), newAutomaton(secrets).find(text, nil))
		if !slices.Equal(got, want) {
			t.Fatalf("secrets %q text %q: automaton covers %v, Index covers %v", secrets, text, got, want)
		}
	}
}

// coverage marks the bytes of text that some span covers.
func coverage(n int, spans []span) []bool {
	c := make([]bool, n)
	for _, s := range spans {
		for i := s.start; i < s.end; i++ {
			c[i] = true
		}
	}
	return c
}

var maskRE = regexp.MustCompile(`\[REDACTED:[a-z_]+\]`)

func FuzzRedact(f *testing.F) {
	for _, l := range plantedCorpus {
		f.Add(l.line, "tok_9d8c7b6a5f4e3d2c")
	}
	f.Add("x€abcdefy", "\x82\xacabcdef")
	f.Add("a\xff\xfe\xfdsecret\xc3b", "\xff\xfe\xfdsecret")
	f.Add("password=\"unterminated \\\" x", "unterminated")
	f.Add("-----BEGIN PRIVATE KEY-----", "PRIVATE")
	f.Fuzz(func(t *testing.T, in, secret string) {
		r := New(Options{}).With(secret)
		out, counts := r.String(in)
		if utf8.ValidString(in) && !utf8.ValidString(out) {
			t.Fatalf("valid input %q gave invalid output %q", in, out)
		}
		if counts.Total() == 0 && out != in {
			t.Fatalf("no counts but output changed: %q -> %q", in, out)
		}
		if len(secret) >= DefaultMinSecretLen {
			// Every occurrence left must overlap a mask (a secret made of mask text).
			masked := coverage(len(out), nil)
			for _, m := range maskRE.FindAllStringIndex(out, -1) {
				for i := m[0]; i < m[1]; i++ {
					masked[i] = true
				}
			}
			for i := 0; i+len(secret) <= len(out); i++ {
				if out[i:i+len(secret)] == secret && !slices.Contains(masked[i:i+len(secret)], true) {
					t.Fatalf("secret %q survived in %q (input %q)", secret, out, in)
				}
			}
		}
		outB, countsB := r.Bytes([]byte(in))
		if string(outB) != out || countsB != counts {
			t.Fatalf("Bytes %q %v != String %q %v", outB, countsB, out, counts)
		}
		tr, _ := Truncate([]byte(out), len(in)/3, len(in)/4)
		if utf8.ValidString(out) && !utf8.Valid(tr) {
			t.Fatalf("Truncate of valid %q gave invalid %q", out, tr)
		}
	})
}

// benchSecrets are 10 secrets of the sizes Cove injects: API keys, envd tokens, env values.
func benchSecrets(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%032x", uint64(i+1)*0x9e3779b97f4a7c15)
	}
	return s
}

// benchLine is a typical ~200-byte JSON log line holding one known secret.
func benchLine(secret string) string {
	return `{"time":"2025-01-02T10:00:00.123Z","level":"INFO","msg":"process started","sandbox_id":"ix8kq2m3","team":"acme","cmd":"python app.py --token ` + secret + `","pid":4242}`
}

func BenchmarkRedactLine(b *testing.B) {
	secrets := benchSecrets(10)
	r := New(Options{Secrets: secrets})
	line := benchLine(secrets[7])
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		r.String(line)
	}
}

func BenchmarkRedactNoMatch(b *testing.B) {
	r := New(Options{Secrets: benchSecrets(10)})
	line := benchLine("not-a-secret-at-all-just-text-xx")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		r.String(line)
	}
}

func BenchmarkRedactPatterns(b *testing.B) {
	r := New(Options{})
	line := strings.Join([]string{plantedCorpus[0].line, plantedCorpus[3].line, plantedCorpus[7].line}, "\n")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		r.String(line)
	}
}

// BenchmarkExact compares one strings.Index scan per secret with the automaton, to place
// acThreshold.
func BenchmarkExact(b *testing.B) {
	for _, n := range []int{4, 10, 16, 24, 32, 64, 256, 1024} {
		secrets := benchSecrets(n)
		line := benchLine("no-known-secret-here")
		b.Run(fmt.Sprintf("index/%d", n), func(b *testing.B) {
			for b.Loop() {
				findEach(line, secrets, nil)
			}
		})
		a := newAutomaton(secrets)
		b.Run(fmt.Sprintf("automaton/%d", n), func(b *testing.B) {
			for b.Loop() {
				a.find(line, nil)
			}
		})
	}
}

func TestExact(t *testing.T) {
	t.Parallel()
	r := New(Options{Secrets: []string{"global-secret"}}).With("sandbox-secret")
	tests := []struct{ name, in, want string }{
		{"a value equal to a known secret is masked", "sandbox-secret", "[REDACTED:exact]"},
		{"a value holding a parent's secret is masked", "x=global-secret", "x=[REDACTED:exact]"},
		{"a pattern that is no known secret stays", "Bearer abc123def456", "Bearer abc123def456"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := r.Exact(tt.in); got != tt.want {
				t.Errorf("Exact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestOwnAndOnAdd(t *testing.T) {
	t.Parallel()
	global := New(Options{Secrets: []string{"global-secret-1"}})
	r := global.With("sandbox-secret-1")
	var calls [][]string
	r.OnAdd(func(own []string) { calls = append(calls, own) })
	r.AddSecret("command-secret-1")
	r.AddSecret("command-secret-1") // known: no call
	r.AddSecret("short")            // too short to mask: no call
	global.AddSecret("global-secret-2")
	t.Run("own lists the secrets given to With and AddSecret, not the parent's", func(t *testing.T) {
		if got := r.Own(); !slices.Equal(got, []string{"sandbox-secret-1", "command-secret-1"}) {
			t.Errorf("Own() = %q", got)
		}
	})
	t.Run("OnAdd is called once per new secret with all of them", func(t *testing.T) {
		if len(calls) != 1 || !slices.Equal(calls[0], []string{"sandbox-secret-1", "command-secret-1"}) {
			t.Errorf("OnAdd calls %q, want one with both own secrets", calls)
		}
	})
	t.Run("after OnAdd(nil) nothing is called", func(t *testing.T) {
		r.OnAdd(nil)
		r.AddSecret("command-secret-2")
		if len(calls) != 1 {
			t.Errorf("OnAdd calls after OnAdd(nil): %q", calls)
		}
	})
}

func TestValueMasksWhatASecretNamedKeyHolds(t *testing.T) {
	r := New(Options{Secrets: []string{"exact-secret-1"}})
	for _, tc := range []struct {
		name, key string
		in, want  any
		masks     int
	}{
		{"a string under a secret key is masked whole", "token", "plain", "[REDACTED:key_value]", 1},
		{"a number under a secret key is masked", "pin_password", float64(1234), "[REDACTED:key_value]", 1},
		{"a bool under a secret key is kept", "auth", true, true, 0},
		{"a string under another key is redacted like text", "note", "is exact-secret-1", "is [REDACTED:exact]", 1},
		{"a nested secret key is masked", "db", map[string]any{"password": "x", "port": float64(5)}, map[string]any{"password": "[REDACTED:key_value]", "port": float64(5)}, 1},
		{"an array under a secret key is masked item by item", "apiKeys", []any{"a", "b"}, []any{"[REDACTED:key_value]", "[REDACTED:key_value]"}, 2},
		{"a tokenizer is no token", "tokenizer", "bpe", "bpe", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, c := r.Value(tc.key, tc.in)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || c.Total() != tc.masks {
				t.Errorf("Value(%q, %v) = %v, %d masks; want %v, %d", tc.key, tc.in, got, c.Total(), tc.want, tc.masks)
			}
		})
	}
}
