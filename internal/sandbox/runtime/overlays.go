package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A sandbox's root overlay names its layers by descriptor (/proc/self/fd/N), so the host's
// mountinfo no longer says which template layers an overlay stacks; a template store must
// still know, or it frees the layers of a running sandbox. So each overlay is also recorded in
// a host-wide directory: one file per mount, its mount point then its lower dirs, one a line.
// A record whose mount point is no mount any more (a crash) counts for nothing and is removed.

// OverlayRecords is where the records live: host-wide, as mountinfo is, so every server and
// CLI on the host sharing a template store sees every other's sandboxes.
var OverlayRecords = "/run/cove/overlays"

// overlayRecord is merged's record: named by its path as mountinfo shows it (symlinks
// resolved), which is what the record's first line holds too.
func overlayRecord(merged string) string {
	sum := sha256.Sum256([]byte(realPath(merged)))
	return filepath.Join(OverlayRecords, hex.EncodeToString(sum[:12]))
}

// recordOverlay notes that the overlay mounted on merged stacks lowers.
func recordOverlay(merged string, lowers []string) error {
	if err := os.MkdirAll(OverlayRecords, 0o700); err != nil {
		return err
	}
	tmp := overlayRecord(merged) + ".tmp"
	if err := os.WriteFile(tmp, []byte(realPath(merged)+"\n"+strings.Join(lowers, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, overlayRecord(merged))
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// forgetOverlay removes merged's record, once it is unmounted.
func forgetOverlay(merged string) { _ = os.Remove(overlayRecord(merged)) }

// MountedLowers are the lower dirs of every overlay mounted on this host: those mountinfo
// names, and those of the records of overlays still mounted.
func MountedLowers() map[string]bool {
	dirs := map[string]bool{}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return dirs
	}
	points := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 {
			points[UnescapeMountinfo(fields[4])] = true
		}
		_, opts, ok := strings.Cut(line, " - overlay ")
		if !ok {
			continue
		}
		for _, o := range strings.Split(opts, ",") {
			if lower, ok := strings.CutPrefix(o, "lowerdir="); ok {
				for _, dir := range strings.Split(lower, ":") {
					dirs[UnescapeMountinfo(dir)] = true
				}
			}
		}
	}
	entries, _ := os.ReadDir(OverlayRecords)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		path := filepath.Join(OverlayRecords, e.Name())
		rec, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(rec)), "\n")
		if !points[lines[0]] {
			_ = os.Remove(path) // its overlay is gone: a crash left the record
			continue
		}
		for _, l := range lines[1:] {
			dirs[l] = true
		}
	}
	return dirs
}

// UnescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, …).
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
