package storetest

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// sealedSets: the vault's sets, by name, each listed under the node that put it last.
func sealedSets(t *testing.T, db Engine) {
	ctx := context.Background()
	if b, err := db.SealedSet(ctx, "sb_none"); err != nil || b != nil {
		t.Fatalf("a set never put: %q %v, want nil and no error", b, err)
	}
	for _, put := range []struct {
		node, name string
		sealed     []byte
	}{
		{"", "sb_one", []byte{0, 1, 2}},
		{"", "sb_two", []byte("two")},
		{"node-a", "sb_moved", []byte("first")},
		{"node-b", "sb_moved", []byte("second")}, // the node it moved to puts it again
	} {
		if err := db.PutSealedSet(ctx, put.node, put.name, put.sealed); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := db.SealedSet(ctx, "sb_one"); err != nil || !bytes.Equal(b, []byte{0, 1, 2}) {
		t.Errorf("sb_one reads %q %v", b, err)
	}
	if b, err := db.SealedSet(ctx, "sb_moved"); err != nil || string(b) != "second" {
		t.Errorf("sb_moved reads %q %v, want the last put", b, err)
	}
	for node, want := range map[string][]string{"": {"sb_one", "sb_two"}, "node-a": nil, "node-b": {"sb_moved"}} {
		got, err := db.SealedSetNames(ctx, node)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("node %q lists %v %v, want %v", node, got, err, want)
		}
	}
	for range 2 { // deleting one that is gone is no error
		if err := db.DeleteSealedSet(ctx, "", "sb_one"); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.DeleteSealedSet(ctx, "node-a", "sb_moved"); err != nil { // the node it left ends it
		t.Fatal(err)
	}
	if b, err := db.SealedSet(ctx, "sb_moved"); err != nil || string(b) != "second" {
		t.Errorf("the node a sandbox left deleted the set of the node it moved to: %q %v", b, err)
	}
	if b, err := db.SealedSet(ctx, "sb_one"); err != nil || b != nil {
		t.Errorf("a deleted set reads %q %v", b, err)
	}
	if got, _ := db.SealedSetNames(ctx, ""); !slices.Equal(got, []string{"sb_two"}) {
		t.Errorf("after the delete the lone server lists %v", got)
	}
}
