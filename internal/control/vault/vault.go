// Package vault keeps small sets of secret values sealed, for a server that must know them
// again after a restart (or on another node, after a move): the values a sandbox's output is
// redacted of (its secret env vars, its commands' secret envs, its network rules' secrets),
// which a client gave only at create or at a command's start. It also seals values other
// packages keep in the store (Seal, Unseal).
//
// The one idea: a value is never written in the clear. Each set is sealed with AES-256-GCM
// under a key that lives in its own file (<dir>/.key, 0600 in a 0700 directory; a cluster's
// nodes derive it from the cluster secret), its name sealed in as associated data, and kept
// in the store (KeepIn: a row per set, this node's) — or, for a vault that has no store (the
// TLS CA's), one file per set, <dir>/<name>. So a copy of the database or of the logs (a
// backup, a bug report) holds no secret, and a grep of the data dir for a planted secret finds
// none; whoever reads the key file as root can open them, as they could read a running
// sandbox's memory.
package vault

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Vault is the sealed sets under one directory. Safe for concurrent use on distinct names;
// Put and Delete of one name must not race (the orchestrator serialises them per sandbox).
type Vault struct {
	dir  string
	aead cipher.AEAD
	key  []byte // for Derive
	sets Sets   // nil: the sets are files in dir
	node string // the node whose sets Names lists, with sets
}

// Sets keeps sealed sets by name in the store (store.SealedSets): each names the node that
// put it last, so a node lists (and prunes) only its own while any node reads any set.
type Sets interface {
	PutSealedSet(ctx context.Context, node, name string, sealed []byte) error
	// SealedSet returns name's sealed set; nil and no error when there is none.
	SealedSet(ctx context.Context, name string) ([]byte, error)
	// DeleteSealedSet removes name's set when node put it last.
	DeleteSealedSet(ctx context.Context, node, name string) error
	SealedSetNames(ctx context.Context, node string) ([]string, error)
}

// KeepIn moves the vault's sets into the store, as node's: the files a release before kept
// are put there and removed (a crash between the two leaves a file whose set is already
// kept: put again, the same, and removed), and from then on every set lives there.
func (v *Vault) KeepIn(ctx context.Context, sets Sets, node string) error {
	names, err := v.fileNames()
	if err != nil {
		return err
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(v.dir, name))
		if err != nil {
			return fmt.Errorf("vault: move %s into the store: %w", name, err)
		}
		if _, err := v.openSet(name, b); err != nil {
			return fmt.Errorf("vault: move %s into the store: %w", name, err)
		}
		if err := sets.PutSealedSet(ctx, node, name, b); err != nil {
			return fmt.Errorf("vault: move %s into the store: %w", name, err)
		}
		if err := os.Remove(filepath.Join(v.dir, name)); err != nil {
			return fmt.Errorf("vault: move %s into the store: %w", name, err)
		}
	}
	v.sets, v.node = sets, node
	return nil
}

const keyFile = ".key"

// validName is compiled on first use: its 127-fold repetition took 1.6–2.4 ms at package init,
// which every envd start (the same binary) paid.
var validName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`) })

// Open opens the vault in dir, making it and its key on first use.
func Open(dir string) (*Vault, error) {
	return open(dir, nil)
}

// OpenKeyed opens the vault in dir with a key given rather than kept in dir: a cluster's
// nodes seal with one key derived from the cluster's secret, so each opens what another
// sealed in the shared store. A dir whose own key differs is refused: what it sealed would
// not open.
func OpenKeyed(dir string, key []byte) (*Vault, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("vault: a key is 32 bytes, not %d", len(key))
	}
	return open(dir, key)
}

func open(dir string, given []byte) (*Vault, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, keyFile))
	switch {
	case given != nil && errors.Is(err, os.ErrNotExist):
		key = given
	case given != nil && err == nil && !bytes.Equal(key, given):
		return nil, fmt.Errorf("vault: %s holds a key of its own, not the one given: what it sealed would not open (a cluster node needs a new data dir)", dir)
	case errors.Is(err, os.ErrNotExist):
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("vault: new key: %w", err)
		}
		if err := writeFile(filepath.Join(dir, keyFile), key); err != nil {
			return nil, fmt.Errorf("vault: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("vault: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("vault: key %s is %d bytes, not 32", filepath.Join(dir, keyFile), len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if leftover(e.Name()) {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	return &Vault{dir: dir, aead: aead, key: key}, nil
}

func (v *Vault) path(name string) (string, error) {
	if !validName().MatchString(name) {
		return "", fmt.Errorf("vault: bad name %q", name)
	}
	return filepath.Join(v.dir, name), nil
}

// Put replaces name's set with values, durably (written, synced, renamed into place).
func (v *Vault) Put(name string, values []string) error {
	path, err := v.path(name)
	if err != nil {
		return err
	}
	plain, err := json.Marshal(values)
	if err != nil {
		return fmt.Errorf("vault: put %s: %w", name, err)
	}
	nonce := make([]byte, v.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("vault: put %s: %w", name, err)
	}
	// The name is sealed in as associated data: a file renamed to another sandbox's name
	// does not open.
	sealed := v.aead.Seal(nonce, nonce, plain, []byte(name))
	if v.sets != nil {
		err = v.sets.PutSealedSet(context.Background(), v.node, name, sealed)
	} else {
		err = writeFile(path, sealed)
	}
	if err != nil {
		return fmt.Errorf("vault: put %s: %w", name, err)
	}
	return nil
}

// Get returns name's set; nil and no error when there is none.
func (v *Vault) Get(name string) ([]string, error) {
	path, err := v.path(name)
	if err != nil {
		return nil, err
	}
	var b []byte
	if v.sets != nil {
		b, err = v.sets.SealedSet(context.Background(), name)
	} else {
		b, err = os.ReadFile(path)
	}
	if errors.Is(err, os.ErrNotExist) || err == nil && b == nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vault: get %s: %w", name, err)
	}
	return v.openSet(name, b)
}

// openSet unseals name's set.
func (v *Vault) openSet(name string, b []byte) ([]string, error) {
	n := v.aead.NonceSize()
	if len(b) < n {
		return nil, fmt.Errorf("vault: get %s: the set is cut short", name)
	}
	plain, err := v.aead.Open(nil, b[:n], b[n:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("vault: get %s: it does not open with this vault's key: %w", name, err)
	}
	var values []string
	if err := json.Unmarshal(plain, &values); err != nil {
		return nil, fmt.Errorf("vault: get %s: %w", name, err)
	}
	return values, nil
}

// Delete removes name's set; none is not an error. In the store, only this node's: a
// sandbox's old node, ending it after a move, leaves the set of the node it moved to.
func (v *Vault) Delete(name string) error {
	path, err := v.path(name)
	if err != nil {
		return err
	}
	if v.sets != nil {
		err = v.sets.DeleteSealedSet(context.Background(), v.node, name)
	} else if err = os.Remove(path); errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("vault: delete %s: %w", name, err)
	}
	return nil
}

// Names lists the vault's sets: this node's, when they are kept in the store.
func (v *Vault) Names() ([]string, error) {
	if v.sets != nil {
		names, err := v.sets.SealedSetNames(context.Background(), v.node)
		if err != nil {
			return nil, fmt.Errorf("vault: %w", err)
		}
		return names, nil
	}
	return v.fileNames()
}

// fileNames lists the sets kept as files in the vault's directory.
func (v *Vault) fileNames() ([]string, error) {
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && validName().MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// writeFile writes b to path atomically and durably, 0600.
func writeFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// leftover reports whether name is a temp file a crash left (removed at Open).
func leftover(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}

// Seal seals plain under the vault's key with name as associated data, for a record that
// keeps a secret in a store (a team secret's value): the result opens only with this key and
// under the same name, so a sealed value copied into another record does not open.
func (v *Vault) Seal(name string, plain []byte) ([]byte, error) {
	nonce := make([]byte, v.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("vault: seal %s: %w", name, err)
	}
	return v.aead.Seal(nonce, nonce, plain, []byte(name)), nil
}

// Unseal opens what Seal sealed under name.
func (v *Vault) Unseal(name string, sealed []byte) ([]byte, error) {
	n := v.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("vault: unseal %s: the value is cut short", name)
	}
	plain, err := v.aead.Open(nil, sealed[:n], sealed[n:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("vault: unseal %s: it does not open with this vault's key: %w", name, err)
	}
	return plain, nil
}

// Derive returns 32 secret bytes derived from the vault's key for label (HKDF-SHA256): a
// secret that need never be written, the same after a restart and, in a cluster (one key,
// from the cluster's secret), on every node. The egress CA's key is one.
func (v *Vault) Derive(label string) []byte {
	b, err := hkdf.Key(sha256.New, v.key, nil, "cove vault: "+label, 32)
	if err != nil {
		panic("vault: hkdf of 32 bytes cannot fail: " + err.Error())
	}
	return b
}
