package requestid_test

import (
	"testing"

	"github.com/cove-dev/cove/sdk/requestid"
)

func TestAnnotateNamesTheCallOnce(t *testing.T) {
	tests := []struct {
		name, msg, id, want string
	}{
		{"a message gets the id", "sandbox i1 was killed: timeout", "r1", "sandbox i1 was killed: timeout (request id r1)"},
		{"a message naming the id already is kept", "trace of r1 is empty", "r1", "trace of r1 is empty"},
		{"without an id nothing is added", "boom", "", "boom"},
		{"Cove's own transitions name the system id", "sandbox i1 was killed", requestid.System, "sandbox i1 was killed (request id system)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := requestid.Annotate(tt.msg, tt.id); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMintedIDsAreValidAndSortInMintingOrder(t *testing.T) {
	prev := ""
	for range 1000 {
		id := requestid.New()
		if !requestid.Valid(id) || len(id) != 20 || id <= prev {
			t.Fatalf("id %q after %q", id, prev)
		}
		prev = id
	}
	for _, bad := range []string{"", "has space", string(make([]byte, requestid.MaxLen+1))} {
		if requestid.Valid(bad) {
			t.Errorf("%q is valid", bad)
		}
	}
}
