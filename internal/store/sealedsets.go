package store

import "context"

// SealedSets keeps the vault's sets (internal/control/vault: the secret values a sandbox's output is
// redacted of), sealed by the vault before they get here: the store never holds a value in
// the clear. Each set names the node that put it last: a node lists (and prunes) only its
// own, while any node reads any set (a sandbox moved to it, a copy of a snapshot taken on
// another).
type SealedSets interface {
	// PutSealedSet stores name's sealed set as node's ("" on a lone server), replacing one
	// of that name.
	PutSealedSet(ctx context.Context, node, name string, sealed []byte) error
	// SealedSet returns name's sealed set; nil and no error when there is none.
	SealedSet(ctx context.Context, name string) ([]byte, error)
	// DeleteSealedSet removes name's set when node put it last: a sandbox's old node, ending
	// it after a move, leaves the set of the node it moved to. None is not an error.
	DeleteSealedSet(ctx context.Context, node, name string) error
	// SealedSetNames lists the names of node's sets.
	SealedSetNames(ctx context.Context, node string) ([]string, error)
}
