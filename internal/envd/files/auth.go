package files

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/envd/envdapi"
	"github.com/cove-dev/cove/internal/envd/fault"
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
		return fmt.Errorf("%w: invalid signature for %s of this path and user", fault.ErrUnauthenticated, op)
	}
	if exp != 0 && time.Now().Unix() > exp {
		return errExpired
	}
	return nil
}

// errExpired has E2B's exact message: clients match on it.
var errExpired = fmt.Errorf("signature is already expired%w", unauthenticated{})

// unauthenticated carries fault.ErrUnauthenticated without adding words to the message.
type unauthenticated struct{}

func (unauthenticated) Error() string { return "" }
func (unauthenticated) Is(target error) bool {
	return target == fault.ErrUnauthenticated
}
