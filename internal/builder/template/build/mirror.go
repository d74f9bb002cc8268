package build

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/builder/template"
)

// ValidMirror checks a Debian mirror URL as debootstrap takes it: http, https or file, with a
// host (a path for file). "" is valid: the machine's apt sources.
func ValidMirror(mirror string) error {
	if mirror == "" {
		return nil
	}
	u, err := url.Parse(mirror)
	if err != nil {
		return fmt.Errorf("%w: mirror %q: %v", template.ErrInvalid, mirror, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file":
		return fmt.Errorf("%w: mirror %q: want an http, https or file URL", template.ErrInvalid, mirror)
	case u.Scheme == "file" && (u.Host != "" || u.Path == ""):
		return fmt.Errorf("%w: mirror %q: want file:///path", template.ErrInvalid, mirror)
	case u.Scheme != "file" && u.Host == "":
		return fmt.Errorf("%w: mirror %q: the URL names no host", template.ErrInvalid, mirror)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: mirror %q: credentials, a query or a fragment are not part of a mirror URL", template.ErrInvalid, mirror)
	}
	return nil
}

// AptMirror returns the Debian mirror this machine's apt uses for suite, read from the deb822
// files in /etc/apt/sources.list.d/*.sources and the one-line /etc/apt/sources.list{,.d/*.list}.
// Template builds use it so they download from wherever the host is allowed to.
func AptMirror(suite string) (string, error) {
	return aptMirror("/etc/apt", suite)
}

func aptMirror(etc, suite string) (string, error) {
	sources, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.sources"))
	for _, f := range sources {
		if uri := deb822Mirror(f, suite); uri != "" {
			return uri, nil
		}
	}
	lists, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.list"))
	for _, f := range append([]string{filepath.Join(etc, "sources.list")}, lists...) {
		if uri := oneLineMirror(f, suite); uri != "" {
			return uri, nil
		}
	}
	return "", fmt.Errorf("no apt source for suite %q in %s/sources.list{,.d}: pass a mirror", suite, etc)
}

// deb822Mirror returns the first URI of the first enabled "deb" stanza that lists suite.
func deb822Mirror(file, suite string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, stanza := range strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n\n") {
		fields := map[string]string{}
		var key string
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			if (line[0] == ' ' || line[0] == '\t') && key != "" {
				fields[key] += " " + strings.TrimSpace(line) // continuation line
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			key = strings.ToLower(strings.TrimSpace(k))
			fields[key] = strings.TrimSpace(v)
		}
		if strings.EqualFold(fields["enabled"], "no") ||
			!slices.Contains(strings.Fields(fields["types"]), "deb") ||
			!slices.Contains(strings.Fields(fields["suites"]), suite) {
			continue
		}
		if uris := strings.Fields(fields["uris"]); len(uris) > 0 && usableURI(uris[0]) {
			return strings.TrimSuffix(uris[0], "/")
		}
	}
	return ""
}

// oneLineMirror returns the URI of the first "deb [options] URI suite components" line for suite.
func oneLineMirror(file, suite string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") { // options, possibly several words
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 2 && fields[1] == suite && usableURI(fields[0]) {
			return strings.TrimSuffix(fields[0], "/")
		}
	}
	return ""
}

func usableURI(u string) bool {
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "file:/")
}
