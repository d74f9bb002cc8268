// Package secrets keeps a team's secrets (E2B's /secrets API): named values that sandboxes'
// network rules name as placeholders (${e2b.secrets.NAME}) and that Cove's egress proxy
// resolves on the host, so a value never enters a sandbox.
//
// The one idea: values are write-only. Every read returns metadata; only Value, which the
// egress proxy calls, returns a value. The store is one JSON file (0600) replaced atomically
// on every change, so a crash loses nothing that was acknowledged.
package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
)

// Errors callers branch on.
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "secret not found")
	ErrConflict = errdefs.New(errdefs.ErrConflict, "secret exists")
	ErrInvalid  = errdefs.New(errdefs.ErrInvalidArgument, "invalid secret")
)

// Info is a secret's metadata: what every read returns.
type Info struct {
	ID             string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

type secret struct {
	Info
	Team     string   `json:"team"`
	Versions []string `json:"versions"` // Versions[i] is version i+1
}

// Store is a file-backed secret store. Safe for concurrent use.
type Store struct {
	path string
	mu   sync.Mutex
	all  []*secret
}

// Open opens (or starts) the store at path.
func Open(path string) (*Store, error) {
	s := &Store{path: path}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if err := json.Unmarshal(b, &s.all); err != nil {
		return nil, fmt.Errorf("secrets: %s: %w", path, err)
	}
	return s, nil
}

// validName is compiled on first use, not at package init, which every envd start (the
// same binary) would pay.
var validName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`) })

func checkMetadata(md map[string]string) error {
	if len(md) > 32 {
		return fmt.Errorf("%w: metadata holds %d entries, more than 32", ErrInvalid, len(md))
	}
	total := 0
	for k, v := range md {
		if len(k) > 128 || len(v) > 1024 {
			return fmt.Errorf("%w: metadata[%q]: keys are at most 128 bytes, values 1024", ErrInvalid, k)
		}
		total += len(k) + len(v)
	}
	if total > 8192 {
		return fmt.Errorf("%w: metadata is %d bytes, more than 8192", ErrInvalid, total)
	}
	return nil
}

func checkValue(v string) error {
	if v == "" {
		return fmt.Errorf("%w: value must not be empty", ErrInvalid)
	}
	if len(v) > 64<<10 {
		return fmt.Errorf("%w: value is %d bytes, more than 65536", ErrInvalid, len(v))
	}
	return nil
}

// find returns the team's secret by id or (lower-cased) name. Caller holds s.mu.
func (s *Store) find(team, ref string) *secret {
	name := strings.ToLower(ref)
	for _, x := range s.all {
		if x.Team == team && (x.ID == ref || x.Name == name) {
			return x
		}
	}
	return nil
}

// Create stores a new secret with its first version.
func (s *Store) Create(team, name, value string, md map[string]string) (Info, error) {
	name = strings.ToLower(name)
	if !validName().MatchString(name) || strings.HasPrefix(name, "sec_") {
		return Info{}, fmt.Errorf("%w: name %q: 1 to 128 of [a-z0-9._-], starting with a letter or digit, not sec_", ErrInvalid, name)
	}
	if err := errors.Join(checkValue(value), checkMetadata(md)); err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.find(team, name) != nil {
		return Info{}, fmt.Errorf("%w: %q", ErrConflict, name)
	}
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	now := time.Now().UTC()
	if md == nil {
		md = map[string]string{}
	}
	x := &secret{Info: Info{ID: "sec_" + hex.EncodeToString(b), Name: name, CurrentVersion: 1, Metadata: md, CreatedAt: now, UpdatedAt: now},
		Team: team, Versions: []string{value}}
	s.all = append(s.all, x)
	if err := s.save(); err != nil {
		s.all = s.all[:len(s.all)-1]
		return Info{}, err
	}
	return x.Info, nil
}

// Update stores value as the secret's new version (and replaces its metadata when md is
// not nil).
func (s *Store) Update(team, ref, value string, md map[string]string) (Info, error) {
	if err := errors.Join(checkValue(value), checkMetadata(md)); err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.find(team, ref)
	if x == nil {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, ref)
	}
	old := *x
	x.Versions = append(append([]string(nil), x.Versions...), value)
	x.CurrentVersion, x.UpdatedAt = int64(len(x.Versions)), time.Now().UTC()
	if md != nil {
		x.Metadata = md
	}
	if err := s.save(); err != nil {
		*x = old
		return Info{}, err
	}
	return x.Info, nil
}

// Get returns a secret's metadata.
func (s *Store) Get(team, ref string) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.find(team, ref); x != nil {
		return x.Info, nil
	}
	return Info{}, fmt.Errorf("%w: %q", ErrNotFound, ref)
}

// List returns up to limit of the team's secrets by name after the name next, and the next
// page's token ("" on the last page).
func (s *Store) List(team string, limit int, next string) ([]Info, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Info
	for _, x := range s.all {
		if x.Team == team && x.Name > next {
			out = append(out, x.Info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if limit > 0 && len(out) > limit {
		return out[:limit], out[limit-1].Name
	}
	return out, ""
}

// Delete removes a secret and all its versions.
func (s *Store) Delete(team, ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.all {
		if x.Team == team && (x.ID == ref || x.Name == strings.ToLower(ref)) {
			all := append(append([]*secret(nil), s.all[:i]...), s.all[i+1:]...)
			old := s.all
			s.all = all
			if err := s.save(); err != nil {
				s.all = old
				return err
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrNotFound, ref)
}

// Value returns the current value of the team's secret name: for the egress proxy only.
func (s *Store) Value(team, name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.find(team, name); x != nil {
		return x.Versions[len(x.Versions)-1], true
	}
	return "", false
}

// save writes the store to a temporary file, syncs it and renames it over the old one.
func (s *Store) save() error {
	b, err := json.Marshal(s.all)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".secrets-*")
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("secrets: %w", err)
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	return nil
}
