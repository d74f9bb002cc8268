package events

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
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
