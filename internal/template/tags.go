package template

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// A tag is a name for one build of a template, E2B's "name:tag": <store>/<name>@<tag> holds
// a copy of the template's meta.json as that build made it (its layers, config and build id),
// so a sandbox started from "name:tag" gets that build even after the name is rebuilt. The
// layers a tag lists are kept as long as the tag is. "name:default" is the name itself.

// DefaultTag is the tag every template name has: its latest build.
const DefaultTag = "default"

// Tag is one tag of a template.
type Tag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"build_id"`
	CreatedAt time.Time `json:"created_at"`
}

// SplitTag splits "name:tag" into its name and tag; the tag is "" without one.
func SplitTag(ref string) (name, tag string) {
	name, tag, _ = strings.Cut(ref, ":")
	return name, tag
}

func (s *Store) tagDir(name, tag string) string { return filepath.Join(s.dir, name+"@"+tag) }

// SetTag points tag of template name at the build ref ("name" or "name:tag") is now.
func (s *Store) SetTag(ref, tag string) (*Template, error) {
	t, err := s.Get(ref)
	if err != nil {
		return nil, err
	}
	if err := ValidName(tag); err != nil || tag == DefaultTag {
		return nil, fmt.Errorf("%w: tag %q must be 1-63 of [a-z0-9_-] and not %q", ErrInvalid, tag, DefaultTag)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp := filepath.Join(s.dir, ".build-tag-"+t.Name+"-"+randomSuffix())
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	tagged := *t
	tagged.CreatedAt = time.Now().UTC()
	if err := writeMeta(tmp, &tagged); err != nil {
		return nil, err
	}
	dir := s.tagDir(t.Name, tag)
	if _, err := os.Lstat(dir); err == nil {
		old := filepath.Join(s.dir, ".trash-tag-"+randomSuffix())
		if err := os.Rename(dir, old); err != nil {
			return nil, err
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	return &tagged, nil
}

// RemoveTag deletes tag of template name and frees the layers nothing else uses.
func (s *Store) RemoveTag(name, tag string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if ValidName(tag) != nil || tag == DefaultTag {
		return fmt.Errorf("%w: tag %q of %s cannot be removed", ErrInvalid, tag, name)
	}
	if err := os.RemoveAll(s.tagDir(name, tag)); err != nil {
		return err
	}
	_, err := s.gcLayers()
	return err
}

// Tags lists the tags of template name, by tag ("default" first).
func (s *Store) Tags(name string) ([]Tag, error) {
	t, err := s.Get(name)
	if err != nil {
		return nil, err
	}
	out := []Tag{{Tag: DefaultTag, BuildID: t.BuildID, CreatedAt: t.CreatedAt}}
	dirs, _ := filepath.Glob(s.tagDir(name, "*"))
	sort.Strings(dirs)
	for _, d := range dirs {
		m, err := readMeta(d)
		if err != nil {
			continue
		}
		out = append(out, Tag{Tag: strings.TrimPrefix(filepath.Base(d), name+"@"), BuildID: m.BuildID, CreatedAt: m.CreatedAt})
	}
	return out, nil
}

// getTagged reads "name:tag".
func (s *Store) getTagged(name, tag string) (*Template, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("get template: %w", err)
	}
	if tag == DefaultTag {
		return s.Get(name)
	}
	if ValidName(tag) != nil {
		return nil, fmt.Errorf("%w: tag %q", ErrInvalid, tag)
	}
	t, err := readMeta(s.tagDir(name, tag))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("template %s:%s: %w", name, tag, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	s.taggedStartSnapshot(name, t)
	return t, s.resolve(t)
}

// taggedLayers are the layers every tag of every template lists.
func (s *Store) taggedLayers() map[string]bool {
	used := map[string]bool{}
	dirs, _ := filepath.Glob(filepath.Join(s.dir, "*@*"))
	for _, d := range dirs {
		if m, err := readMeta(d); err == nil {
			for _, k := range m.Layers {
				used[k] = true
			}
		}
	}
	return used
}
