package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// TestRecordSecretsKeptSealed: a snapshot's config, a volume's token and a network record's
// config reach the database sealed when the DB has the vault, and open again.
func TestRecordSecretsKeptSealed(t *testing.T) {
	ctx := context.Background()
	db := open(t, true)
	const token, password, volToken = "ea-snapshot-token-1", "proxy-password-1", "volume-token-1"
	at := time.Now().UTC()
	if err := db.InsertSnapshot(ctx, &store.Snapshot{ID: "snap-1", TeamID: "t", SandboxID: "sb", TemplateID: "base", CreatedAt: at,
		Config: []byte(`{"envdAccessToken":"` + token + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := db.InsertVolume(ctx, &store.Volume{ID: "vol-1", TeamID: "t", Name: "data", Token: volToken, CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutNetworkRecord(ctx, &store.NetworkRecord{Node: "node-a", SandboxID: "sb", Config: []byte(`{"proxy":"` + password + `"}`), UpdatedAt: at}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ query, secret string }{
		{`SELECT config FROM snapshots`, token},
		{`SELECT token FROM volumes`, volToken},
		{`SELECT config FROM network_records`, password},
	} {
		var raw string
		if err := db.Pool().QueryRow(ctx, c.query).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(raw, store.SealedPrefix) || strings.Contains(raw, c.secret) {
			t.Errorf("%s: %q is not sealed", c.query, raw)
		}
	}
	recs, err := db.NetworkRecords(ctx, "node-a")
	if err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Config), password) {
		t.Fatalf("network records %+v %v", recs, err)
	}
	// A sealed value moved to another node's row does not open: the node is sealed in.
	if _, err := db.Pool().Exec(ctx, `UPDATE network_records SET node = 'node-b'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.NetworkRecords(ctx, "node-b"); err == nil {
		t.Error("a record moved to another node opened")
	}
}
