// Package envdapi holds the shapes of envd's plain-HTTP API that both sides use: envd's
// /files handler and the clients that call it (the Go SDK). It imports nothing of envd's.
package envdapi

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// MetadataHeaderPrefix starts the upload headers that carry file metadata:
// "X-Metadata-<Key>: <value>" stores <value> under the lower-cased <Key>.
const MetadataHeaderPrefix = "X-Metadata-"

// FileEntry is one written file in the answer to POST /files:
// [{"name","type":"file","path","metadata"}], metadata being what the upload stored on the
// file, left out when none.
type FileEntry struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// The operations a /files signature allows.
const (
	SignRead  = "read"
	SignWrite = "write"
)

// Sign returns the v1 signature of a /files URL, as the E2B SDKs make it:
// "v1_" + base64 (no padding) of sha256("<path>:<read|write>:<user>:<token>[:<expiration>]").
// path and user are the query values exactly as sent ("" when absent); expiration is unix
// seconds, or 0 for a signature that does not expire.
func Sign(path, op, user, token string, expiration int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}
