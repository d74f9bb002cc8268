package files

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/requestid"
)

// AccessTokenHeader carries the sandbox's envd access token.
const AccessTokenHeader = "X-Access-Token"

// operation is what a signature allows: reading (GET) or writing (POST) one path.
type operation string

const (
	opRead  operation = "read"
	opWrite operation = "write"
)

// Sign returns the v1 signature of a /files URL (envdapi.Sign).
func Sign(path, op, user, token string, expiration int64) string {
	return envdapi.Sign(path, op, user, token, expiration)
}

// authorize lets a request through when no access token is set, when it carries the token
// in X-Access-Token, or when its signature query parameter signs this path, operation and
// user with the token and has not expired.
func (h *Handler) authorize(r *http.Request, op operation) error {
	token := h.defaults.AccessToken()
	if token == "" {
		return nil
	}
	if got := r.Header.Get(AccessTokenHeader); got != "" {
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return fmt.Errorf("%w: the access token does not match", fault.ErrUnauthenticated)
		}
		return nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return fmt.Errorf("%w: missing %s header or signature query parameter", fault.ErrUnauthenticated, AccessTokenHeader)
	}
	var exp int64
	if s := q.Get("signature_expiration"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("%w: signature_expiration %q is not unix seconds", fault.ErrUnauthenticated, s)
		}
		exp = n
	}
	want := Sign(q.Get("path"), string(op), q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errBadSignature
	}
	if exp != 0 && time.Now().Unix() > exp {
		return errExpired
	}
	return nil
}

// errExpired and errBadSignature have E2B's exact messages, and are answered with E2B's
// exact body (writeSignatureError): clients match on them.
var (
	errExpired      = fmt.Errorf("signature is already expired%w", unauthenticated{})
	errBadSignature = fmt.Errorf("invalid signature%w", unauthenticated{})
)

// writeSignatureError answers a signed URL that is expired or wrongly signed with E2B's
// body, {"code":401,"message":"..."}: the request id travels in the X-Request-Id header
// only. It reports false for any other error, which the caller writes.
func writeSignatureError(ctx context.Context, w http.ResponseWriter, err error) bool {
	if err != errExpired && err != errBadSignature {
		return false
	}
	if id := telemetry.RequestID(ctx); id != "" {
		w.Header().Set(requestid.HeaderAlt, id)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(cove.ErrorBody{Code: http.StatusUnauthorized, Message: err.Error()})
	return true
}

// unauthenticated carries fault.ErrUnauthenticated without adding words to the message.
type unauthenticated struct{}

func (unauthenticated) Error() string { return "" }
func (unauthenticated) Is(target error) bool {
	return target == fault.ErrUnauthenticated
}
