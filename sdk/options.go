package cove

import "time"

// Option configures a call into a sandbox. Each call's documentation says which options
// it reads; the others are ignored.
type Option func(*options)

type options struct {
	onStdout, onStderr func(string)
	onData             func([]byte)
	envs               map[string]string
	cwd                string
	user               string
	timeout            time.Duration
	timeoutSet         bool
	stdin              bool
	tag                string
	depth              uint32
	recursive          bool
	metadata           map[string]string
	command            string
	signatureTTL       time.Duration
}

// DefaultCommandTimeout bounds a command (Run, Start, PTY.Create) unless Timeout says
// otherwise, as in the E2B SDKs.
const DefaultCommandTimeout = 60 * time.Second

func apply(opts []Option) *options {
	o := &options{}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	return o
}

// commandTimeout is the command's timeout: Timeout's, else the default.
func (o *options) commandTimeout() time.Duration {
	if o.timeoutSet {
		return o.timeout
	}
	return DefaultCommandTimeout
}

// OnStdout calls f with each chunk of the command's stdout as it arrives, on the stream's
// goroutine.
func OnStdout(f func(string)) Option { return func(o *options) { o.onStdout = f } }

// OnStderr calls f with each chunk of the command's stderr as it arrives.
func OnStderr(f func(string)) Option { return func(o *options) { o.onStderr = f } }

// OnPTYData calls f with each chunk a terminal (PTY.Create) writes.
func OnPTYData(f func([]byte)) Option { return func(o *options) { o.onData = f } }

// Envs adds environment variables to the command's, over the sandbox's own.
func Envs(env map[string]string) Option { return func(o *options) { o.envs = env } }

// Cwd sets the command's working directory; the user's home by default.
func Cwd(dir string) Option { return func(o *options) { o.cwd = dir } }

// User runs the command, or reads and writes files, as this user of the sandbox instead
// of its default user.
func User(name string) Option { return func(o *options) { o.user = name } }

// Timeout bounds the command: when it passes, envd kills the process and the call ends
// with ErrTimeout. 0 means no limit; DefaultCommandTimeout applies when it is not given.
// The bound is dropped by Disconnect.
func Timeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// Stdin keeps the command's stdin open for SendStdin and CloseStdin; by default it reads
// /dev/null.
func Stdin() Option { return func(o *options) { o.stdin = true } }

// Tag names a background command, so that it can be found again without its pid.
func Tag(tag string) Option { return func(o *options) { o.tag = tag } }

// Depth makes Files.List descend this many levels (1 by default).
func Depth(n uint32) Option { return func(o *options) { o.depth = n } }

// Recursive makes Files.Watch watch subdirectories too.
func Recursive() Option { return func(o *options) { o.recursive = true } }

// Metadata stores these pairs on a written file (Files.Write, WriteFrom) as user.e2b.*
// extended attributes, as the E2B SDKs' write metadata does. Keys are lower-cased by the
// sandbox; keys and values must be printable US-ASCII. The answer's Metadata is what was
// stored.
func Metadata(md map[string]string) Option { return func(o *options) { o.metadata = md } }

// SignatureExpiration makes a signed URL (DownloadURL, UploadURL) expire after d.
func SignatureExpiration(d time.Duration) Option { return func(o *options) { o.signatureTTL = d } }

// Command makes PTY.Create run this command line on the terminal (`bash -l -c line`)
// instead of an interactive login shell.
func Command(line string) Option { return func(o *options) { o.command = line } }
