package templates

import (
	"regexp"
	"testing"
	"testing/fstest"
)

func TestBaseKeyFollowsTheDefinition(t *testing.T) {
	def := func(pip string) fstest.MapFS {
		return fstest.MapFS{
			"base/Dockerfile": {Data: []byte("BOOTSTRAP trixie sudo\nCOPY pip.conf /etc/pip.conf\n")},
			"base/pip.conf":   {Data: []byte(pip)},
		}
	}
	a, b := keyOf(def("[global]\n")), keyOf(def("[global]\nbreak-system-packages = true\n"))
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"the key starts with the suite and ends with 12 hex digits", regexp.MustCompile(`^trixie-[0-9a-f]{12}$`).MatchString(a)},
		{"a changed copied file changes the key", a != b},
		{"the same content gives the same key", a == keyOf(def("[global]\n"))},
		{"the shipped definition's key names its suite", regexp.MustCompile(`^bookworm-[0-9a-f]{12}$`).MatchString(BaseKey())},
		{"a definition that does not parse is keyed invalid", regexp.MustCompile(`^invalid-`).MatchString(keyOf(fstest.MapFS{"base/Dockerfile": {Data: []byte("FROM base\n")}}))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.ok {
				t.Fatalf("keys %q, %q; shipped %q", a, b, BaseKey())
			}
		})
	}
}
