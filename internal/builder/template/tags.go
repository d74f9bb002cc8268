package template

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// A tag is a name for one build of a template, E2B's "name:tag": its record (a tag record in
// store.Templates) is a copy of the template's record as that build made it (its layers,
// config and build id), so a sandbox started from "name:tag" gets that build even after the
// name is rebuilt. The layers a tag lists are kept as long as the tag is. "name:default" is
// the name itself. (A release before kept a tag as a directory <name>@<tag>/meta.json:
// OpenAt moves those into records.)

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

// tagDir is where a release before kept tag of name (adopt moves it into a record).
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
	tagged := *t
	tagged.CreatedAt = time.Now().UTC()
	if err := s.putRecord(context.Background(), &tagged, tag, true); err != nil {
		return nil, fmt.Errorf("tag %s as %s: %w", ref, tag, err)
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
	if err := s.records.DeleteTemplateTag(context.Background(), name, tag); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("remove tag %s:%s: %w", name, tag, err)
	}
	_, err := s.FreeLayers()
	return err
}

// Tags lists the tags of template name, by tag ("default" first).
func (s *Store) Tags(name string) ([]Tag, error) {
	t, err := s.Get(name)
	if err != nil {
		return nil, err
	}
	out := []Tag{{Tag: DefaultTag, BuildID: t.BuildID, CreatedAt: t.CreatedAt}}
	recs, err := s.records.ListTemplateTags(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("tags of %s: %w", name, err)
	}
	for _, r := range recs {
		m, err := decodeRecord(r)
		if err != nil {
			continue
		}
		out = append(out, Tag{Tag: r.Tag, BuildID: m.BuildID, CreatedAt: m.CreatedAt})
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
	ctx := context.Background()
	t, err := s.readRecord(ctx, name, tag)
	if err != nil {
		return nil, err
	}
	if t.Root == "" {
		// A root's tag stands on the name's tree: have it here (fetched, adopted).
		if _, err := s.current(ctx, name); err != nil {
			return nil, err
		}
	}
	s.place(t, name)
	s.taggedStartSnapshot(name, t)
	return t, s.Resolve(t)
}

// taggedLayers are the layers every tag of every template lists.
func (s *Store) taggedLayers() (map[string]bool, error) {
	ctx := context.Background()
	used := map[string]bool{}
	names, err := s.records.ListTemplates(ctx)
	if err != nil {
		return nil, fmt.Errorf("tagged layers: %w", err)
	}
	for _, n := range names {
		tags, err := s.records.ListTemplateTags(ctx, n.Name)
		if err != nil {
			return nil, fmt.Errorf("tagged layers: %w", err)
		}
		for _, r := range tags {
			if m, err := decodeRecord(r); err == nil {
				for _, k := range m.Layers {
					used[k] = true
				}
			}
		}
	}
	return used, nil
}
