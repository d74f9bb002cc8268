package events

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Webhook delivery headers, E2B's names.
const (
	HeaderWebhookID        = "e2b-webhook-id"
	HeaderDeliveryID       = "e2b-delivery-id"
	HeaderSignatureVersion = "e2b-signature-version"
	HeaderSignature        = "e2b-signature"
	SignatureVersion       = "v1"
)

// Sign returns E2B's v1 signature of a delivery body: base64 of sha256(secret || body),
// standard alphabet, without "=" padding.
func Sign(secret string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(secret))
	h.Write(body)
	return base64.RawStdEncoding.EncodeToString(h.Sum(nil))
}

// Verify reports whether signature is body's v1 signature under secret, in constant time.
// Receivers written in Go can use it.
func Verify(secret string, body []byte, signature string) bool {
	return subtle.ConstantTimeCompare([]byte(Sign(secret, body)), []byte(signature)) == 1
}

// Errors of VerifyDelivery.
var (
	ErrBadSignature = errors.New("webhook signature does not match the body")
	ErrStale        = errors.New("webhook delivery is stale")
)

// VerifyDelivery checks a delivery as a Go receiver should: the signature over body, then
// the stamp inside it, refused when it was sent more than maxAge from now (a replay).
// Receivers that also remember (deliveryId, attempt) pairs for maxAge refuse every replay.
func VerifyDelivery(secret string, body []byte, signature string, maxAge time.Duration, now time.Time) (Stamp, error) {
	if !Verify(secret, body, signature) {
		return Stamp{}, ErrBadSignature
	}
	var b struct {
		Delivery Stamp `json:"delivery"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Delivery.SentAt.IsZero() {
		return Stamp{}, fmt.Errorf("%w: no delivery stamp in the body", ErrStale)
	}
	if age := now.Sub(b.Delivery.SentAt); age > maxAge || age < -maxAge {
		return b.Delivery, fmt.Errorf("%w: sent %s ago, more than %s", ErrStale, age.Round(time.Second), maxAge)
	}
	return b.Delivery, nil
}
