// Package dockerfile turns a Dockerfile into a template definition: the base it starts FROM
// and the steps of Cove's layered builder.
//
// The one idea: a Dockerfile is read as the steps E2B's builder would send, with Docker's
// meaning (RUN as root unless USER says otherwise, WORKDIR relative to the last one, ARG and
// ENV substituted where Docker substitutes them). Only what Cove can build is accepted: FROM,
// RUN, COPY, ADD (local files), ENV, ARG, WORKDIR, USER, CMD and ENTRYPOINT, and Cove's own
// BOOTSTRAP in place of FROM (a Debian root debootstrapped: the base template's first line).
// Anything else is an error naming its line, never silently skipped.
package dockerfile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
)

// ErrSyntax is a Dockerfile Cove cannot build; the error names the line.
var ErrSyntax = errors.New("dockerfile")

// Copy is one COPY or ADD source of the Dockerfile, to pack from the build context.
type Copy struct {
	Step int // index into Definition.Steps
	Src  string
	Dest string
}

// Definition is what a Dockerfile builds.
type Definition struct {
	// From is the FROM reference: a Cove template name or an OCI image reference.
	From string
	// Bootstrap is the BOOTSTRAP line (suite, then packages), which replaces FROM.
	Bootstrap *template.Bootstrap
	// Steps are the builder steps, in order; COPY steps have no FilesHash yet (see Copies).
	Steps []template.Step
	// Copies are the COPY steps' sources, relative to the build context.
	Copies []Copy
	// StartCmd is ENTRYPOINT and CMD joined, as a shell command; "" when neither is given.
	StartCmd string
}

// Pack archives each COPY source from the build context ctxDir into dir as <hash>.tar (a
// build.DirSource) and sets the steps' files hashes.
func (d *Definition) Pack(ctxDir, dir string) error {
	for _, c := range d.Copies {
		f, err := os.CreateTemp(dir, ".pack-*")
		if err != nil {
			return err
		}
		hash, err := build.ArchiveContext(ctxDir, c.Src, c.Dest, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			return fmt.Errorf("COPY %s: %w", c.Src, err)
		}
		if err := os.Rename(f.Name(), path.Join(dir, hash+".tar")); err != nil {
			return err
		}
		d.Steps[c.Step].FilesHash = hash
	}
	return nil
}

// Parse reads a Dockerfile. args are --build-arg values; they override ARG defaults.
func Parse(r io.Reader, args map[string]string) (*Definition, error) {
	lines, err := logicalLines(r)
	if err != nil {
		return nil, err
	}
	d := &Definition{}
	vars := map[string]string{}    // declared ARGs' and ENVs' values, for substitution
	argVals := map[string]string{} // declared ARGs: RUN commands see them as variables
	var argOrder []string
	user := "root"
	workdir := "/"
	var entrypoint, cmd string
	for _, l := range lines {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: line %d (%s): %s", ErrSyntax, l.no, l.instr, fmt.Sprintf(format, a...))
		}
		expand := func(s string) string {
			return os.Expand(s, func(k string) string { return vars[k] })
		}
		rest := l.rest
		if l.instr != "FROM" && l.instr != "BOOTSTRAP" && d.From == "" && d.Bootstrap == nil && l.instr != "ARG" {
			return nil, bad("comes before FROM")
		}
		switch l.instr {
		case "BOOTSTRAP":
			if d.From != "" || d.Bootstrap != nil {
				return nil, bad("one FROM or BOOTSTRAP per Dockerfile")
			}
			f := strings.Fields(expand(rest))
			if len(f) == 0 {
				return nil, bad("want BOOTSTRAP suite [package...]")
			}
			b := template.Bootstrap{Suite: f[0], Include: f[1:]}
			if err := b.Validate(); err != nil {
				return nil, bad("%v", err)
			}
			d.Bootstrap = &b
		case "FROM":
			if d.From != "" || d.Bootstrap != nil {
				return nil, bad("multi-stage builds are not supported: one FROM per Dockerfile")
			}
			f := strings.Fields(expand(rest))
			if len(f) == 0 || (len(f) != 1 && !(len(f) == 3 && strings.EqualFold(f[1], "AS"))) || strings.HasPrefix(f[0], "--") {
				return nil, bad("want FROM image [AS name]")
			}
			d.From = f[0]
		case "ARG":
			for _, a := range strings.Fields(rest) {
				k, def, hasDef := strings.Cut(a, "=")
				if k == "" {
					return nil, bad("empty ARG name")
				}
				if v, ok := args[k]; ok {
					vars[k] = v
				} else if hasDef {
					vars[k] = unquote(expand(def))
				}
				if _, ok := vars[k]; ok && d.From != "" {
					if _, seen := argVals[k]; !seen {
						argOrder = append(argOrder, k)
					}
					argVals[k] = vars[k]
				}
			}
		case "ENV":
			kv, err := envPairs(expand(rest))
			if err != nil {
				return nil, bad("%v", err)
			}
			for i := 0; i < len(kv); i += 2 {
				vars[kv[i]] = kv[i+1]
			}
			d.Steps = append(d.Steps, template.Step{Kind: template.StepEnv, Args: kv})
		case "RUN":
			c, err := command(rest)
			if err != nil {
				return nil, bad("%v", err)
			}
			if strings.HasPrefix(strings.TrimSpace(rest), "--") {
				return nil, bad("RUN flags (--mount, --network) are not supported")
			}
			var prefix strings.Builder
			for _, k := range argOrder { // Docker passes ARGs to RUN as environment
				prefix.WriteString(k + "=" + shellQuote(argVals[k]) + " ")
			}
			if prefix.Len() > 0 {
				c = "export " + prefix.String() + "&& " + c
			}
			d.Steps = append(d.Steps, template.Step{Kind: template.StepRun, Args: []string{c, user}})
		case "COPY", "ADD":
			f := strings.Fields(expand(rest))
			var owner, mode string
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				k, v, _ := strings.Cut(strings.TrimPrefix(f[0], "--"), "=")
				switch k {
				case "chown":
					owner = v
				case "chmod":
					if _, err := strconv.ParseUint(v, 8, 32); err != nil {
						return nil, bad("--chmod=%s is not an octal mode", v)
					}
					mode = fmt.Sprintf("%04s", v)
				default:
					return nil, bad("flag --%s is not supported (only --chown and --chmod)", k)
				}
				f = f[1:]
			}
			if len(f) < 2 {
				return nil, bad("needs a source and a destination")
			}
			dest := f[len(f)-1]
			if !path.IsAbs(dest) {
				trailing := strings.HasSuffix(dest, "/")
				dest = path.Join(workdir, dest)
				if trailing {
					dest += "/"
				}
			}
			if len(f) > 2 && !strings.HasSuffix(dest, "/") {
				return nil, bad("with several sources the destination must end with /")
			}
			if owner == "" {
				owner = "root"
			}
			for _, src := range f[:len(f)-1] {
				if strings.Contains(src, "://") {
					return nil, bad("remote sources (%s) are not supported: copy local files", src)
				}
				clean := path.Clean(src)
				if clean == ".." || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
					return nil, bad("source %s is outside the build context", src)
				}
				d.Copies = append(d.Copies, Copy{Step: len(d.Steps), Src: clean, Dest: dest})
				d.Steps = append(d.Steps, template.Step{Kind: template.StepCopy, Args: []string{clean, dest, owner, mode}})
			}
		case "WORKDIR":
			w := expand(strings.TrimSpace(rest))
			if w == "" {
				return nil, bad("needs a directory")
			}
			workdir = path.Join(workdir, w)
			if path.IsAbs(w) {
				workdir = path.Clean(w)
			}
			d.Steps = append(d.Steps, template.Step{Kind: template.StepWorkdir, Args: []string{workdir}})
		case "USER":
			u := expand(strings.TrimSpace(rest))
			if u == "" || strings.ContainsAny(u, " \t") {
				return nil, bad("needs one user[:group]")
			}
			user = u
			d.Steps = append(d.Steps, template.Step{Kind: template.StepUser, Args: []string{u}})
		case "CMD", "ENTRYPOINT":
			c, err := command(rest)
			if err != nil {
				return nil, bad("%v", err)
			}
			if l.instr == "CMD" {
				cmd = c
			} else {
				entrypoint = c
			}
		default:
			return nil, bad("instruction %s is not supported (FROM, BOOTSTRAP, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT are)", l.instr)
		}
	}
	if d.From == "" && d.Bootstrap == nil {
		return nil, fmt.Errorf("%w: no FROM instruction", ErrSyntax)
	}
	d.StartCmd = strings.TrimSpace(entrypoint + " " + cmd)
	return d, nil
}

type line struct {
	no    int
	instr string
	rest  string
}

// logicalLines joins continued lines (a trailing backslash) and drops comments and blanks.
func logicalLines(r io.Reader) ([]line, error) {
	var out []line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	no, start := 0, 0
	var cur strings.Builder
	for sc.Scan() {
		no++
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // comments inside a continued instruction
		}
		if cur.Len() == 0 {
			start = no
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		instr, rest, _ := strings.Cut(cur.String(), " ")
		out = append(out, line{no: start, instr: strings.ToUpper(instr), rest: strings.TrimSpace(rest)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("%w: line %d: the last instruction ends with a continuation", ErrSyntax, start)
	}
	return out, nil
}

// command reads a RUN, CMD or ENTRYPOINT argument: the exec form (a JSON array) becomes a
// shell command with each word quoted; the shell form stays as written.
func command(rest string) (string, error) {
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return "", errors.New("needs a command")
	}
	if !strings.HasPrefix(rest, "[") {
		return rest, nil
	}
	var words []string
	if err := json.Unmarshal([]byte(rest), &words); err != nil || len(words) == 0 {
		return "", fmt.Errorf("exec form %s is not a JSON array of strings", rest)
	}
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " "), nil
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// envPairs reads ENV's forms: "K=V K2=V2" (values may be quoted) or the legacy "K V".
func envPairs(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	first, rest, _ := strings.Cut(s, " ")
	if !strings.Contains(first, "=") {
		if first == "" || strings.TrimSpace(rest) == "" {
			return nil, errors.New("want ENV KEY=VALUE or ENV KEY VALUE")
		}
		return []string{first, strings.TrimSpace(rest)}, nil
	}
	var kv []string
	for _, w := range splitWords(s) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", w)
		}
		kv = append(kv, k, unquote(v))
	}
	return kv, nil
}

// splitWords splits on blanks outside double or single quotes.
func splitWords(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote = r
			cur.WriteRune(r)
		case r == ' ' || r == '\t':
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}
