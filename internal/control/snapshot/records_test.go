package snapshot_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// newDB opens a real SQLite store in a directory of the test's, sealing with a vault of its
// own, as the server does.
func newDB(t *testing.T) *sqlite.DB {
	t.Helper()
	db, _ := newDBAt(t, t.TempDir())
	return db
}

func newDBAt(t *testing.T, dir string) (*sqlite.DB, string) {
	t.Helper()
	v, err := vault.Open(filepath.Join(dir, "vault"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cove.db")
	db, err := sqlite.Open(t.Context(), path, sqlite.WithSealer(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func gone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
}

// The records as the release before this one wrote them (indented JSON of its
// Snapshot and Volume, the lease files bare or JSON).
const (
	legacySnapshotID = "snap-0123456789abcdef"
	legacySnapshot   = `{
  "id": "snap-0123456789abcdef",
  "name": "ready",
  "teamId": "team-1",
  "sandboxId": "sb-source",
  "templateId": "base",
  "runtime": "runc",
  "metadata": {
    "stage": "warm"
  },
  "secure": true,
  "envdAccessToken": "ea-legacy-snapshot-token",
  "createdAt": "2026-11-30T10:00:00.123456Z",
  "bytes": 123456,
  "network": {
    "allowInternet": true
  },
  "inbound": {
    "trafficToken": "legacy-traffic-token",
    "httpsPorts": [
      8443
    ]
  },
  "volumes": [
    {
      "volumeId": "vol-0123456789abcdef",
      "path": "/data",
      "readOnly": true
    }
  ]
}`
	legacyVolumeID = "vol-0123456789abcdef"
	legacyVolume   = `{
  "volumeID": "vol-0123456789abcdef",
  "name": "data",
  "teamId": "team-1",
  "token": "legacy-volume-token",
  "createdAt": "2026-11-29T09:00:00Z"
}`
)

// TestOpenMovesLegacyRecords: a data dir laid out by the release before (snapshot.json,
// volume.json, lease files) is moved into the store at the first Open, the files' data kept
// and the record files removed, the secrets sealed; a second Open, and one after a crash
// between the move and the removal, change nothing.
func TestOpenMovesLegacyRecords(t *testing.T) {
	data := t.TempDir()
	snaps, vols := filepath.Join(data, "snapshots"), filepath.Join(data, "volumes")
	snapDir := filepath.Join(snaps, legacySnapshotID)
	halfDir := filepath.Join(snaps, "snap-fedcba9876543210")
	volDir := filepath.Join(vols, legacyVolumeID)
	lay := func() {
		writeFile(t, filepath.Join(snapDir, "snapshot.json"), legacySnapshot)
		writeFile(t, filepath.Join(snapDir, "checkpoint", "pages-1.img"), "memory")
		writeFile(t, filepath.Join(halfDir, "snapshot.json.tmp"), "{") // a save a crash cut short
		writeFile(t, filepath.Join(volDir, "volume.json"), legacyVolume)
		writeFile(t, filepath.Join(volDir, "data", "kept.txt"), "kept")
		writeFile(t, filepath.Join(volDir, "mounts", "sb-writer"), `{"readOnly":false,"paths":["/data","/again"]}`)
		writeFile(t, filepath.Join(volDir, "mounts", "sb-early"), "ro") // the first leases' bare mode
	}
	lay()
	db, dbPath := newDBAt(t, t.TempDir())
	open := func(t *testing.T) (*snapshot.Store, *snapshot.Volumes) {
		t.Helper()
		st, err := snapshot.Open(t.Context(), snaps, db, "")
		if err != nil {
			t.Fatal(err)
		}
		vs, err := snapshot.OpenVolumes(t.Context(), vols, db, "")
		if err != nil {
			t.Fatal(err)
		}
		return st, vs
	}
	wantSnap := &snapshot.Snapshot{ID: legacySnapshotID, Name: "ready", TeamID: "team-1", SandboxID: "sb-source", TemplateID: "base", Runtime: "runc",
		Metadata: map[string]string{"stage": "warm"}, Secure: true, EnvdAccessToken: "ea-legacy-snapshot-token",
		CreatedAt: time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC), Bytes: 123456, Network: &egress.Policy{AllowInternet: true},
		Inbound: network.Inbound{TrafficToken: "legacy-traffic-token", HTTPSPorts: []int{8443}},
		Volumes: []snapshot.VolumeMount{{VolumeID: legacyVolumeID, Path: "/data", ReadOnly: true}}}
	wantVol := &snapshot.Volume{ID: legacyVolumeID, Name: "data", TeamID: "team-1", Token: "legacy-volume-token",
		CreatedAt: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	check := func(t *testing.T, st *snapshot.Store, vs *snapshot.Volumes) {
		t.Helper()
		sn, err := st.Get(legacySnapshotID)
		if err != nil || !reflect.DeepEqual(sn, wantSnap) {
			t.Fatalf("moved snapshot %+v %v,\nwant %+v", sn, err, wantSnap)
		}
		if all, _ := st.List(snapshot.Filter{}); len(all) != 1 {
			t.Errorf("snapshots %+v, want the one", all)
		}
		vol, err := vs.Get("team-1", "data")
		if err != nil || !reflect.DeepEqual(vol, wantVol) {
			t.Fatalf("moved volume %+v %v, want %+v", vol, err, wantVol)
		}
		alive := func(string) bool { return true }
		if h := vs.Holders(vol, alive); !reflect.DeepEqual(h, []string{"sb-early", "sb-writer"}) {
			t.Errorf("holders %v", h)
		}
		mounts, err := vs.MountsOf("team-1", "sb-writer")
		if err != nil || len(mounts) != 2 || mounts[0].Path != "/again" || mounts[1].Path != "/data" || mounts[0].ReadOnly {
			t.Errorf("sb-writer's mounts %+v %v", mounts, err)
		}
		if mounts, _ := vs.MountsOf("team-1", "sb-early"); len(mounts) != 0 {
			t.Errorf("a bare-mode lease named paths: %+v", mounts)
		}
		if err := vs.Claim(vol, "sb-other", "/x", false, alive); err == nil {
			t.Error("a second writer claimed the volume the moved lease holds read-write")
		}
		gone(t, filepath.Join(snapDir, "snapshot.json"), halfDir, filepath.Join(volDir, "volume.json"), filepath.Join(volDir, "mounts"))
		for path, body := range map[string]string{filepath.Join(snapDir, "checkpoint", "pages-1.img"): "memory", filepath.Join(volDir, "data", "kept.txt"): "kept"} {
			if b, err := os.ReadFile(path); string(b) != body {
				t.Errorf("%s: %q %v; the data stays where it was", path, b, err)
			}
		}
	}

	t.Run("the first start moves the records and removes their files", func(t *testing.T) {
		st, vs := open(t)
		check(t, st, vs)
	})
	t.Run("the secrets are sealed in the store", func(t *testing.T) {
		for _, suffix := range []string{"", "-wal"} {
			b, _ := os.ReadFile(dbPath + suffix)
			for _, secret := range []string{"ea-legacy-snapshot-token", "legacy-traffic-token", "legacy-volume-token"} {
				if bytes.Contains(b, []byte(secret)) {
					t.Errorf("cove.db%s holds %s in the clear", suffix, secret)
				}
			}
		}
	})
	t.Run("a second start finds nothing to move and keeps the records", func(t *testing.T) {
		st, vs := open(t)
		check(t, st, vs)
	})
	t.Run("a start after a crash between the move and the removal skips the records and removes the files", func(t *testing.T) {
		lay() // the files are back as the crashed start left them: their records exist
		st, vs := open(t)
		check(t, st, vs)
	})
}

// TestRecordsBelongToTheirNode: on a store that several nodes share, a node sees only the
// snapshots and volumes whose files it holds, and its Open never removes another's.
func TestRecordsBelongToTheirNode(t *testing.T) {
	db := newDB(t)
	a, err := snapshot.Open(t.Context(), t.TempDir(), db, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	sn := &snapshot.Snapshot{ID: snapshot.NewID(), TeamID: "t1", CreatedAt: time.Now().UTC()}
	if err := os.Mkdir(a.Dir(sn.ID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(sn); err != nil {
		t.Fatal(err)
	}
	b, err := snapshot.Open(t.Context(), t.TempDir(), db, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(sn.ID); err == nil {
		t.Error("node-b found node-a's snapshot")
	}
	if l, _ := b.List(snapshot.Filter{}); len(l) != 0 {
		t.Errorf("node-b lists %+v", l)
	}
	if _, err := a.Get(sn.ID); err != nil {
		t.Errorf("node-a lost its snapshot when node-b opened: %v", err)
	}
	// The same data dir opened under another node name (a server renamed) keeps the files
	// of a snapshot recorded under the old one: they are not half made.
	if _, err := snapshot.Open(t.Context(), filepath.Dir(a.Dir(sn.ID)), db, "node-renamed"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dir(sn.ID)); err != nil {
		t.Errorf("opening under another node name removed a recorded snapshot's files: %v", err)
	}
	rec, err := db.GetSnapshot(t.Context(), sn.ID)
	if err != nil || rec.Node != "node-a" {
		t.Errorf("the record %+v %v, want node-a's", rec, err)
	}

	va, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), db, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	vb, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), db, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := va.Create("t1", "data", 0, snapshot.VolumeLimits{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vb.Get("t1", vol.ID); err == nil {
		t.Error("node-b found node-a's volume")
	}
	if _, err := vb.Create("t1", "data", 0, snapshot.VolumeLimits{Count: 1}); err != nil {
		t.Errorf("node-b's own volume of the name: %v", err)
	}
	if got, err := db.ListVolumes(t.Context(), "node-a", ""); err != nil || len(got) != 1 || got[0].ID != vol.ID {
		t.Errorf("node-a's volume records %+v %v", got, err)
	}
	var _ store.Records = db
}
