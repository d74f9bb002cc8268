package template

import (
	"fmt"
	"strconv"
	"strings"
)

// StepKind is what one build step does. The names are E2B's TemplateStep types.
type StepKind string

// The step kinds. Run and Copy change files and become layers; Env, Workdir and User change
// the template's configuration and what later steps see (Workdir also creates the directory).
const (
	StepRun     StepKind = "RUN"
	StepCopy    StepKind = "COPY"
	StepEnv     StepKind = "ENV"
	StepWorkdir StepKind = "WORKDIR"
	StepUser    StepKind = "USER"
)

func (k StepKind) String() string {
	if k == "" {
		return "unknown"
	}
	return string(k)
}

// ParseStepKind reads a step type, as E2B's SDKs send it (case-insensitive).
func ParseStepKind(s string) (StepKind, error) {
	switch k := StepKind(strings.ToUpper(s)); k {
	case StepRun, StepCopy, StepEnv, StepWorkdir, StepUser:
		return k, nil
	}
	return "", fmt.Errorf("%w: unknown step type %q (want RUN, COPY, ENV, WORKDIR or USER)", ErrInvalid, s)
}

// Step is one instruction of a template definition, in E2B's shape:
//
//	RUN     [cmd, user?]          a shell command, as user (the current USER, else root)
//	COPY    [src, dest, user?, mode?]  files uploaded under FilesHash; mode in octal ("0755")
//	ENV     [k1, v1, k2, v2, ...]
//	WORKDIR [dir]
//	USER    [name]
type Step struct {
	Kind StepKind `json:"type"`
	Args []string `json:"args,omitempty"`
	// FilesHash names the uploaded archive of a COPY (see FileSource).
	FilesHash string `json:"filesHash,omitempty"`
	// Force rebuilds this step (and so every later one) instead of reusing a cached layer.
	Force bool `json:"force,omitempty"`
}

// String is the step as a build log line shows it.
func (s Step) String() string {
	switch s.Kind {
	case StepRun:
		if len(s.Args) > 1 && s.Args[1] != "" {
			return fmt.Sprintf("RUN (as %s) %s", s.Args[1], s.Args[0])
		}
	case StepEnv:
		var kv []string
		for i := 0; i+1 < len(s.Args); i += 2 {
			kv = append(kv, s.Args[i]+"="+s.Args[i+1])
		}
		return "ENV " + strings.Join(kv, " ")
	}
	return strings.TrimSpace(string(s.Kind) + " " + strings.Join(s.Args, " "))
}

// Validate checks a step's arguments, naming the step (1-based) in the error.
func (s Step) Validate(i int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: step %d (%s): %s", ErrInvalid, i+1, s.Kind, fmt.Sprintf(format, args...))
	}
	if _, err := ParseStepKind(string(s.Kind)); err != nil {
		return fmt.Errorf("step %d: %w", i+1, err)
	}
	switch s.Kind {
	case StepRun:
		if len(s.Args) == 0 || strings.TrimSpace(s.Args[0]) == "" {
			return bad("needs a command")
		}
		if len(s.Args) > 2 {
			return bad("takes a command and a user, got %d arguments", len(s.Args))
		}
	case StepCopy:
		if len(s.Args) < 2 || s.Args[0] == "" || s.Args[1] == "" {
			return bad("needs a source and a destination")
		}
		if len(s.Args) > 4 {
			return bad("takes source, destination, user and mode, got %d arguments", len(s.Args))
		}
		if s.FilesHash == "" {
			return bad("filesHash is required")
		}
		if len(s.Args) > 3 && s.Args[3] != "" {
			if _, err := ParseMode(s.Args[3]); err != nil {
				return bad("%v", err)
			}
		}
	case StepEnv:
		if len(s.Args) == 0 || len(s.Args)%2 != 0 {
			return bad("needs key and value pairs, got %d arguments", len(s.Args))
		}
		for j := 0; j < len(s.Args); j += 2 {
			if s.Args[j] == "" || strings.ContainsAny(s.Args[j], "=\x00") {
				return bad("invalid variable name %q", s.Args[j])
			}
		}
	case StepWorkdir:
		if len(s.Args) != 1 || s.Args[0] == "" {
			return bad("needs one directory")
		}
	case StepUser:
		if len(s.Args) != 1 || s.Args[0] == "" {
			return bad("needs one user name")
		}
	}
	return nil
}

// ParseMode parses a COPY step's octal mode.
func ParseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q is not an octal file mode", s)
	}
	return uint32(m), nil
}

// StepResult is what a build did for one step: its layer, whether the layer came from the
// cache, and how long the step took.
type StepResult struct {
	Step    string  `json:"step"`
	Layer   string  `json:"layer,omitempty"`
	Cached  bool    `json:"cached"`
	Seconds float64 `json:"seconds"`
}
