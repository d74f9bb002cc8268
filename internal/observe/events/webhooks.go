package events

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Bounds of a webhook's fields.
const (
	MaxURLLen    = 2048
	MaxSecretLen = 256
	MaxNameLen   = 256
)

// ValidateURL checks that a webhook URL is absolute http or https with a host.
func ValidateURL(raw string) error {
	if raw == "" {
		return errors.New("required")
	}
	if len(raw) > MaxURLLen {
		return fmt.Errorf("longer than %d bytes", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("no host")
	}
	return nil
}

// AllowedHost refuses at once a URL whose host is an address deliveries would refuse
// (outside allow); a name is resolved, and checked, at each delivery.
func AllowedHost(raw string, allow []netip.Prefix) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return nil
	}
	if g := (&guard{allow: allow, own: ownAddresses}); !g.allowed(addr) {
		return fmt.Errorf("%s is a loopback, link-local, private, unique-local or this server's own address: "+
			"deliveries there are refused unless the operator allows its range (cove server --webhook-allow-net)", addr)
	}
	return nil
}

// NewWebhookSecret generates a webhook secret: 32 random bytes.
func NewWebhookSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}

// NewWebhookID mints a webhook's id.
func NewWebhookID() string { return newID("wh_") }

// Wire is ev as the API's listings and every webhook body give it.
func Wire(ev *store.Event) cove.SandboxEvent { return toWire(ev) }

// Record is ev checked and filled as Emit stores it (its id, time and request id), for a
// store that is filled another way (tests, imports).
func Record(ctx context.Context, ev Event) (*store.Event, error) { return toStore(ctx, ev) }
