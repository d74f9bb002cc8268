// Package secrets keeps a team's secrets (E2B's /secrets API): named values that sandboxes'
// network rules name as placeholders (${e2b.secrets.NAME}) and that Cove's egress proxy
// resolves on the host, so a value never enters a sandbox.
//
// The one idea: values are write-only. Every read returns metadata; only Value, which the
// egress proxy calls, returns a value. Records live in the store (store.Secrets); each
// version's value is sealed by the server's vault before it reaches the store, so a copy of
// the database holds no secret.
package secrets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Errors callers branch on.
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "secret not found")
	ErrConflict = errdefs.New(errdefs.ErrConflict, "secret exists")
	ErrInvalid  = errdefs.New(errdefs.ErrInvalidArgument, "invalid secret")
)

// Info is a secret's metadata, what every read returns: the contract's SecretInfo, which the
// API emits and the SDK reads.
type Info = cove.SecretInfo

func infoOf(r *store.Secret) Info {
	md := r.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return Info{ID: r.ID, Name: r.Name, CurrentVersion: r.CurrentVersion, Metadata: md, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// Store is the team secret store over a record store and a sealer. Safe for concurrent use.
type Store struct {
	db   store.Secrets
	seal store.Sealer
	mu   sync.Mutex // serialises a secret's read-modify-write (Update's next version)
}

// sealName is the associated data a version's value is sealed under: a sealed value copied to
// another secret or version does not open.
func sealName(id string, version int64) string { return fmt.Sprintf("secret-%s-v%d", id, version) }

// Open returns the store over db and seal. A secrets.json written by an older Cove at
// legacyPath ("" for none) is moved into db, sealed, then removed: a crash between the two
// leaves the file, and the next Open skips what db already holds.
func Open(ctx context.Context, db store.Secrets, seal store.Sealer, legacyPath string) (*Store, error) {
	s := &Store{db: db, seal: seal}
	if legacyPath != "" {
		if err := s.importLegacy(ctx, legacyPath); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// legacySecret is a secret as secrets.json held it, values in the clear.
type legacySecret struct {
	Info
	Team     string   `json:"team"`
	Versions []string `json:"versions"` // Versions[i] is version i+1
}

func (s *Store) importLegacy(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	var all []legacySecret
	if err := json.Unmarshal(b, &all); err != nil {
		return fmt.Errorf("secrets: %s: %w", path, err)
	}
	for _, x := range all {
		if len(x.Versions) == 0 {
			continue
		}
		if _, err := s.db.GetSecret(ctx, x.Team, x.ID); err == nil {
			continue // moved by an earlier start that stopped before removing the file
		}
		rec := &store.Secret{ID: x.ID, TeamID: x.Team, Name: x.Name, CurrentVersion: 1, Metadata: x.Metadata,
			CreatedAt: x.CreatedAt, UpdatedAt: x.UpdatedAt}
		for i, v := range x.Versions {
			rec.CurrentVersion = int64(i + 1)
			sealed, err := s.seal.Seal(sealName(rec.ID, rec.CurrentVersion), []byte(v))
			if err != nil {
				return fmt.Errorf("secrets: move %s: %w", x.ID, err)
			}
			if i == 0 {
				err = s.db.InsertSecret(ctx, rec, sealed)
			} else {
				err = s.db.AddSecretVersion(ctx, rec, sealed)
			}
			if err != nil {
				return fmt.Errorf("secrets: move %s: %w", x.ID, err)
			}
		}
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("secrets: remove %s after moving it into the store: %w", path, err)
	}
	return nil
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

// storeErr maps the record store's errors to this package's.
func storeErr(ref string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %q", ErrNotFound, ref)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w: %q", ErrConflict, ref)
	}
	return fmt.Errorf("secrets: %w", err)
}

// Create stores a new secret with its first version.
func (s *Store) Create(ctx context.Context, team, name, value string, md map[string]string) (Info, error) {
	name = strings.ToLower(name)
	if !validName().MatchString(name) || strings.HasPrefix(name, "sec_") {
		return Info{}, fmt.Errorf("%w: name %q: 1 to 128 of [a-z0-9._-], starting with a letter or digit, not sec_", ErrInvalid, name)
	}
	if err := errors.Join(checkValue(value), checkMetadata(md)); err != nil {
		return Info{}, err
	}
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	now := time.Now().UTC().Truncate(time.Microsecond)
	rec := &store.Secret{ID: "sec_" + hex.EncodeToString(b), TeamID: team, Name: name, CurrentVersion: 1, Metadata: md, CreatedAt: now, UpdatedAt: now}
	sealed, err := s.seal.Seal(sealName(rec.ID, 1), []byte(value))
	if err != nil {
		return Info{}, err
	}
	if err := s.db.InsertSecret(ctx, rec, sealed); err != nil {
		return Info{}, storeErr(name, err)
	}
	return infoOf(rec), nil
}

// Update stores value as the secret's new version (and replaces its metadata when md is
// not nil).
func (s *Store) Update(ctx context.Context, team, ref, value string, md map[string]string) (Info, error) {
	if err := errors.Join(checkValue(value), checkMetadata(md)); err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.db.GetSecret(ctx, team, s.ref(ref))
	if err != nil {
		return Info{}, storeErr(ref, err)
	}
	rec.CurrentVersion++
	rec.UpdatedAt = time.Now().UTC().Truncate(time.Microsecond)
	if md != nil {
		rec.Metadata = md
	}
	sealed, err := s.seal.Seal(sealName(rec.ID, rec.CurrentVersion), []byte(value))
	if err != nil {
		return Info{}, err
	}
	if err := s.db.AddSecretVersion(ctx, rec, sealed); err != nil {
		return Info{}, storeErr(ref, err)
	}
	return infoOf(rec), nil
}

// ref is a reference as the store looks it up: an id as given, a name lower-cased.
func (s *Store) ref(ref string) string {
	if strings.HasPrefix(ref, "sec_") {
		return ref
	}
	return strings.ToLower(ref)
}

// Get returns a secret's metadata.
func (s *Store) Get(ctx context.Context, team, ref string) (Info, error) {
	rec, err := s.db.GetSecret(ctx, team, s.ref(ref))
	if err != nil {
		return Info{}, storeErr(ref, err)
	}
	return infoOf(rec), nil
}

// List returns up to limit of the team's secrets by name after the name next, and the next
// page's token ("" on the last page).
func (s *Store) List(ctx context.Context, team string, limit int, next string) ([]Info, string, error) {
	ask := limit
	if limit > 0 {
		ask = limit + 1 // one more tells whether a next page exists
	}
	recs, err := s.db.ListSecrets(ctx, team, next, ask)
	if err != nil {
		return nil, "", storeErr(team, err)
	}
	out := make([]Info, 0, len(recs))
	for _, r := range recs {
		out = append(out, infoOf(r))
	}
	if limit > 0 && len(out) > limit {
		return out[:limit], out[limit-1].Name, nil
	}
	return out, "", nil
}

// Delete removes a secret and all its versions.
func (s *Store) Delete(ctx context.Context, team, ref string) error {
	rec, err := s.db.GetSecret(ctx, team, s.ref(ref))
	if err != nil {
		return storeErr(ref, err)
	}
	if err := s.db.DeleteSecret(ctx, team, rec.ID); err != nil {
		return storeErr(ref, err)
	}
	return nil
}

// Value returns the current value of the team's secret name: for the egress proxy only. A
// value that cannot be read or opened is reported as absent (the proxy then refuses the
// placeholder), never as a wrong value.
func (s *Store) Value(team, name string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, version, sealed, err := s.db.SecretValue(ctx, team, strings.ToLower(name))
	if err != nil {
		return "", false
	}
	plain, err := s.seal.Unseal(sealName(id, version), sealed)
	if err != nil {
		return "", false
	}
	return string(plain), true
}
