package store

import (
	"context"
	"time"
)

// NetworkRecord is one sandbox's network allocation on one node (internal/sandbox/network shapes
// it): the slot a restarted server gives back to the sandbox it was made for. A record
// belongs to its node: only that node reads, reclaims or sweeps it.
type NetworkRecord struct {
	Node       string // "" on a server of one box
	SandboxID  string
	Index      int    // the slot's index in the node's address pool
	Link       string // the host end of its veth
	Addr       string // the sandbox's address
	Netns      string // its pinned namespace
	ResolvConf string
	// Config is the sandbox's policy and inbound settings, as JSON the caller shapes: an
	// egress proxy's password, header rules and the traffic token are in it, so the store
	// keeps it sealed (NetworkSealName) when it has a sealer.
	Config    []byte
	UpdatedAt time.Time
}

// NetworkRecords stores network allocation records, by node and sandbox.
type NetworkRecords interface {
	// PutNetworkRecord stores r, replacing the record of its node and sandbox.
	PutNetworkRecord(ctx context.Context, r *NetworkRecord) error
	// NetworkRecords returns node's records, by sandbox id.
	NetworkRecords(ctx context.Context, node string) ([]*NetworkRecord, error)
	// DeleteNetworkRecord removes node's record of a sandbox; none is no error.
	DeleteNetworkRecord(ctx context.Context, node, sandboxID string) error
}

// NetworkSealName is the name a network record's Config is sealed under.
func NetworkSealName(node, sandboxID string) string {
	return "network-config-" + node + "/" + sandboxID
}
