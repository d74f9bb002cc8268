package egress

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/control/vault"
)

// verifies reports whether a leaf c signs for host is trusted by the bundle of other.
func verifies(t *testing.T, c, other *ca, host string) bool {
	t.Helper()
	leaf, err := c.leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(other.pem) {
		t.Fatal("no certificate in the bundle")
	}
	cert, err := x509.ParseCertificate(leaf.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
	return err == nil
}

func TestTheEgressCA(t *testing.T) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keyed := func(t *testing.T, key []byte) *vault.Vault {
		v, err := vault.OpenKeyed(t.TempDir(), key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("two nodes of one cluster make one CA, so a moved sandbox trusts its new node's proxy", func(t *testing.T) {
		a, err := loadCA(t.TempDir(), keyed(t, key))
		if err != nil {
			t.Fatal(err)
		}
		b, err := loadCA(t.TempDir(), keyed(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if !a.key.Equal(b.key) || a.cert.SerialNumber.Cmp(b.cert.SerialNumber) != 0 {
			t.Fatal("two vaults of one key made two CAs")
		}
		if !verifies(t, b, a, "api.example.test") {
			t.Fatal("a leaf of node B's proxy is not trusted by node A's bundle")
		}
	})
	t.Run("another key makes another CA, which the first does not trust", func(t *testing.T) {
		other := bytes.Clone(key)
		other[0] ^= 1
		a, _ := loadCA(t.TempDir(), keyed(t, key))
		b, err := loadCA(t.TempDir(), keyed(t, other))
		if err != nil {
			t.Fatal(err)
		}
		if a.key.Equal(b.key) || verifies(t, b, a, "api.example.test") {
			t.Fatal("another vault key made the same CA")
		}
	})
	t.Run("a restart makes the same CA, byte for byte, and writes no key", func(t *testing.T) {
		vdir, dir := t.TempDir(), t.TempDir()
		v1, err := vault.Open(vdir)
		if err != nil {
			t.Fatal(err)
		}
		first, err := loadCA(dir, v1)
		if err != nil {
			t.Fatal(err)
		}
		v2, err := vault.Open(vdir)
		if err != nil {
			t.Fatal(err)
		}
		second, err := loadCA(dir, v2)
		if err != nil {
			t.Fatal(err)
		}
		if !first.key.Equal(second.key) || !bytes.Equal(first.pem, second.pem) {
			t.Fatal("the restarted server made another CA: adopted sandboxes would not trust its proxy")
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			if e.Name() != "ca.pem" || bytes.Contains(b, []byte("PRIVATE KEY")) {
				t.Errorf("the CA wrote %s; only its certificate is kept, its key is derived", e.Name())
			}
		}
	})
	t.Run("an older release's clear CA key is kept sealed, its file removed", func(t *testing.T) {
		dir := t.TempDir()
		old, err := newCA(nil)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalECPrivateKey(old.key)
		if err != nil {
			t.Fatal(err)
		}
		clear := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
		if err := os.WriteFile(filepath.Join(dir, "ca-key.pem"), clear, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.pem"), old.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		v := keyed(t, key)
		for i := range 2 { // the move, then a start that finds it sealed
			c, err := loadCA(dir, v)
			if err != nil {
				t.Fatal(err)
			}
			if !c.key.Equal(old.key) || !verifies(t, c, old, "api.example.test") {
				t.Fatalf("start %d: the older release's CA was not kept: its sandboxes trust it", i+1)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); !os.IsNotExist(err) {
			t.Fatalf("the clear key is still there: %v", err)
		}
		sealed, err := os.ReadFile(filepath.Join(dir, "ca-key.sealed"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(sealed, []byte("PRIVATE KEY")) || bytes.Contains(sealed, der[:16]) {
			t.Fatal("the kept CA key is readable in the clear")
		}
	})
}
