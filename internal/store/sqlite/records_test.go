package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store"
)

// TestRecordSecretsKeptSealed: a snapshot's config, a volume's token and a network record's
// config reach the file sealed when the DB has the vault, and open again.
func TestRecordSecretsKeptSealed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	v, err := vault.Open(filepath.Join(dir, "vault"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, filepath.Join(dir, "cove.db"), WithSealer(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const token, password, volToken = "ea-snapshot-token-1", "proxy-password-1", "volume-token-1"
	at := time.Now().UTC()
	if err := db.InsertSnapshot(ctx, &store.Snapshot{ID: "snap-1", TeamID: "t", SandboxID: "sb", TemplateID: "base", CreatedAt: at,
		Config: []byte(`{"envdAccessToken":"` + token + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := db.InsertVolume(ctx, &store.Volume{ID: "vol-1", TeamID: "t", Name: "data", Token: volToken, CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutNetworkRecord(ctx, &store.NetworkRecord{SandboxID: "sb", Config: []byte(`{"proxy":"` + password + `"}`), UpdatedAt: at}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ query, secret string }{
		{`SELECT config FROM snapshots`, token},
		{`SELECT token FROM volumes`, volToken},
		{`SELECT config FROM network_records`, password},
	} {
		var raw string
		if err := db.read.QueryRowContext(ctx, c.query).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(raw, store.SealedPrefix) || strings.Contains(raw, c.secret) {
			t.Errorf("%s: %q is not sealed", c.query, raw)
		}
	}
	sn, err := db.GetSnapshot(ctx, "snap-1")
	if err != nil || !strings.Contains(string(sn.Config), token) {
		t.Fatalf("snapshot %+v %v", sn, err)
	}
	vol, err := db.GetVolume(ctx, "vol-1")
	if err != nil || vol.Token != volToken {
		t.Fatalf("volume %+v %v", vol, err)
	}
	recs, err := db.NetworkRecords(ctx, "")
	if err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Config), password) {
		t.Fatalf("network records %+v %v", recs, err)
	}
}
