package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// records covers the records of what a node keeps on its own disk or host: snapshots,
// volumes and their leases, network allocations. Each belongs to its node.
func records(t *testing.T, s Engine) {
	t.Run("snapshots are listed by node, team, sandbox and name, newest first", func(t *testing.T) { snapshotRecords(t, s) })
	t.Run("volumes are unique by node, team and name, and keep their leases", func(t *testing.T) { volumeRecords(t, s) })
	t.Run("network records belong to their node", func(t *testing.T) { networkRecords(t, s) })
}

func snapshotRecords(t *testing.T, s Engine) {
	ctx := context.Background()
	mk := func(id, node, team, sandbox, name string, at time.Time) *store.Snapshot {
		return &store.Snapshot{ID: id, Node: node, TeamID: team, SandboxID: sandbox, TemplateID: "base", Name: name, Runtime: "runc",
			CreatedAt: at, Bytes: 4096, Metadata: map[string]string{"k": id}, Config: []byte(`{"envdAccessToken":"tok-` + id + `"}`)}
	}
	all := []*store.Snapshot{
		mk("snap-a", "", "team-1", "sb-1", "first", base),
		mk("snap-b", "", "team-1", "sb-2", "", base.Add(time.Second)),
		mk("snap-c", "", "team-2", "sb-1", "first", base.Add(2*time.Second)),
		mk("snap-d", "node-b", "team-1", "sb-1", "first", base.Add(3*time.Second)),
	}
	all[1].Metadata, all[1].Config = nil, nil
	for _, sn := range all {
		if err := s.InsertSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InsertSnapshot(ctx, mk("snap-a", "", "team-3", "sb-9", "", base)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second snapshot of one id: %v", err)
	}
	for _, sn := range all {
		if got := must[*store.Snapshot](t)(s.GetSnapshot(ctx, sn.ID)); !reflect.DeepEqual(got, sn) {
			t.Fatalf("get %+v, stored %+v", got, sn)
		}
	}
	if _, err := s.GetSnapshot(ctx, "snap-none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown snapshot: %v", err)
	}
	for _, tc := range []struct {
		name string
		f    store.SnapshotFilter
		want []string
	}{
		{"the one box's, newest first", store.SnapshotFilter{}, []string{"snap-c", "snap-b", "snap-a"}},
		{"another node's", store.SnapshotFilter{Node: "node-b"}, []string{"snap-d"}},
		{"every node's", store.SnapshotFilter{AllNodes: true}, []string{"snap-d", "snap-c", "snap-b", "snap-a"}},
		{"a team's", store.SnapshotFilter{TeamID: "team-1"}, []string{"snap-b", "snap-a"}},
		{"a team's of one sandbox", store.SnapshotFilter{TeamID: "team-1", SandboxID: "sb-1"}, []string{"snap-a"}},
		{"by name", store.SnapshotFilter{Name: "first"}, []string{"snap-c", "snap-a"}},
		{"none", store.SnapshotFilter{Node: "node-c"}, nil},
	} {
		var got []string
		for _, sn := range must[[]*store.Snapshot](t)(s.ListSnapshots(ctx, tc.f)) {
			got = append(got, sn.ID)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if err := s.DeleteSnapshot(ctx, "snap-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, "snap-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "snap-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted snapshot: %v", err)
	}
}

func volumeRecords(t *testing.T, s Engine) {
	ctx := context.Background()
	a := &store.Volume{ID: "vol-a", TeamID: "team-1", Name: "data", Token: "volume-token-a", CreatedAt: base, SizeBytes: 1 << 20}
	b := &store.Volume{ID: "vol-b", TeamID: "team-1", Name: "cache", Token: "volume-token-b", CreatedAt: base.Add(time.Second)}
	c := &store.Volume{ID: "vol-c", TeamID: "team-2", Name: "data", Token: "volume-token-c", CreatedAt: base.Add(2 * time.Second)}
	d := &store.Volume{ID: "vol-d", Node: "node-b", TeamID: "team-1", Name: "data", Token: "volume-token-d", CreatedAt: base}
	for _, v := range []*store.Volume{a, b, c, d} {
		if err := s.InsertVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, dup := range []*store.Volume{
		{ID: "vol-e", TeamID: "team-1", Name: "data", Token: "t", CreatedAt: base},
		{ID: "vol-a", TeamID: "team-3", Name: "other", Token: "t", CreatedAt: base},
	} {
		if err := s.InsertVolume(ctx, dup); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("volume %s %s of a taken name or id: %v", dup.ID, dup.Name, err)
		}
	}
	if got := must[*store.Volume](t)(s.GetVolume(ctx, "vol-a")); !reflect.DeepEqual(got, a) {
		t.Fatalf("get %+v, stored %+v", got, a)
	}
	if _, err := s.GetVolume(ctx, "vol-none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown volume: %v", err)
	}
	ids := func(vs []*store.Volume) (out []string) {
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	if got := ids(must[[]*store.Volume](t)(s.ListVolumes(ctx, "", "team-1"))); !reflect.DeepEqual(got, []string{"vol-a", "vol-b"}) {
		t.Errorf("team-1's volumes on the one box: %v", got)
	}
	if got := ids(must[[]*store.Volume](t)(s.ListVolumes(ctx, "", ""))); !reflect.DeepEqual(got, []string{"vol-a", "vol-b", "vol-c"}) {
		t.Errorf("every team's volumes on the one box: %v", got)
	}
	if got := ids(must[[]*store.Volume](t)(s.ListVolumes(ctx, "node-b", ""))); !reflect.DeepEqual(got, []string{"vol-d"}) {
		t.Errorf("node-b's volumes: %v", got)
	}
	if got := ids(must[[]*store.Volume](t)(s.ListVolumes(ctx, store.AllNodes, "team-1"))); !reflect.DeepEqual(got, []string{"vol-a", "vol-d", "vol-b"}) {
		t.Errorf("team-1's volumes on every node: %v", got)
	}
	// A volume changes hands only from the node that holds it.
	if err := s.MoveVolume(ctx, "vol-d", "node-c", "node-a", 1, 10); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a move from a node that does not hold the volume: %v", err)
	}
	if err := s.MoveVolume(ctx, "vol-none", "", "node-a", 1, 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a move of an unknown volume: %v", err)
	}
	if err := s.MoveVolume(ctx, "vol-d", "node-b", "node-c", 3, 4096); err != nil {
		t.Fatal(err)
	}
	if got := must[*store.Volume](t)(s.GetVolume(ctx, "vol-d")); got.Node != "node-c" || got.Version != 3 || got.UsedBytes != 4096 {
		t.Fatalf("a moved volume reads %+v", got)
	}
	if err := s.MoveVolume(ctx, "vol-d", "node-b", "node-a", 4, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second move from the node it left: %v", err)
	}

	leases := func(id string) []*store.VolumeLease { return must[[]*store.VolumeLease](t)(s.VolumeLeases(ctx, id)) }
	if got := leases("vol-a"); len(got) != 0 {
		t.Fatalf("a new volume's leases: %+v", got)
	}
	for _, l := range []*store.VolumeLease{
		{VolumeID: "vol-a", SandboxID: "sb-2", ReadOnly: true, Paths: []string{"/data"}},
		{VolumeID: "vol-a", SandboxID: "sb-1", ReadOnly: true, Paths: []string{"/ro"}},
		{VolumeID: "vol-a", SandboxID: "sb-1", ReadOnly: false, Paths: []string{"/ro", "/rw"}}, // replaces the one before
	} {
		if err := s.PutVolumeLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	want := []*store.VolumeLease{
		{VolumeID: "vol-a", SandboxID: "sb-1", ReadOnly: false, Paths: []string{"/ro", "/rw"}},
		{VolumeID: "vol-a", SandboxID: "sb-2", ReadOnly: true, Paths: []string{"/data"}},
	}
	if got := leases("vol-a"); !reflect.DeepEqual(got, want) {
		t.Fatalf("leases %+v, want %+v", got, want)
	}
	if err := s.PutVolumeLease(ctx, &store.VolumeLease{VolumeID: "vol-none", SandboxID: "sb-1", Paths: []string{"/x"}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a lease of an unknown volume: %v", err)
	}
	for range 2 { // a second release does nothing
		if err := s.DeleteVolumeLease(ctx, "vol-a", "sb-2"); err != nil {
			t.Fatal(err)
		}
	}
	if got := leases("vol-a"); len(got) != 1 || got[0].SandboxID != "sb-1" {
		t.Fatalf("leases after a release: %+v", got)
	}
	if err := s.DeleteVolume(ctx, "vol-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(ctx, "vol-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	if got := leases("vol-a"); len(got) != 0 {
		t.Fatalf("a deleted volume's leases: %+v", got)
	}
	// Its name is free again.
	if err := s.InsertVolume(ctx, &store.Volume{ID: "vol-f", TeamID: "team-1", Name: "data", Token: "t", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
}

func networkRecords(t *testing.T, s Engine) {
	ctx := context.Background()
	mk := func(node, id string, index int) *store.NetworkRecord {
		return &store.NetworkRecord{Node: node, SandboxID: id, Index: index, Link: "cove" + id, Addr: "198.18.0.2", Netns: "/run/ns-" + id,
			ResolvConf: "/run/resolv-" + id, Config: []byte(`{"policy":{"proxy":"http://user:password@proxy"}}`), UpdatedAt: base}
	}
	for _, r := range []*store.NetworkRecord{mk("", "sb-2", 2), mk("", "sb-1", 1), mk("node-b", "sb-1", 7)} {
		if err := s.PutNetworkRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	moved := mk("", "sb-1", 5)
	moved.Config, moved.UpdatedAt = []byte(`{"inbound":{"trafficToken":"tok"}}`), base.Add(time.Minute)
	if err := s.PutNetworkRecord(ctx, moved); err != nil { // replaces the one before
		t.Fatal(err)
	}
	if got, want := must[[]*store.NetworkRecord](t)(s.NetworkRecords(ctx, "")), []*store.NetworkRecord{moved, mk("", "sb-2", 2)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the one box's records %+v, want %+v", got, want)
	}
	if got := must[[]*store.NetworkRecord](t)(s.NetworkRecords(ctx, "node-b")); len(got) != 1 || got[0].Index != 7 {
		t.Fatalf("node-b's records %+v", got)
	}
	for range 2 { // a second drop does nothing
		if err := s.DeleteNetworkRecord(ctx, "", "sb-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := must[[]*store.NetworkRecord](t)(s.NetworkRecords(ctx, "")); len(got) != 1 || got[0].SandboxID != "sb-2" {
		t.Fatalf("records after a drop %+v", got)
	}
	if got := must[[]*store.NetworkRecord](t)(s.NetworkRecords(ctx, "node-b")); len(got) != 1 {
		t.Fatalf("a drop on one node took another node's record: %+v", got)
	}
}
