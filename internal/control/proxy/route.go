package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/internal/errdefs"
)

// Routing errors.
var (
	errBadTarget = errdefs.New(errdefs.ErrInvalidArgument, "bad sandbox address")
	errNoSigned  = errdefs.New(errdefs.ErrNotFound, "no sandbox matches the signed URL")
)

// route finds the request's sandbox and port: headers first, then the Host, then a
// signed /files URL.
func (p *Proxy) route(ctx context.Context, r *http.Request) (target, error) {
	if id := r.Header.Get(HeaderSandboxID); id != "" {
		t := target{id: id, port: EnvdPort}
		if !validID(id) {
			return t, fmt.Errorf("%w: %s %q is not a sandbox id", errBadTarget, HeaderSandboxID, id)
		}
		if s := r.Header.Get(HeaderSandboxPort); s != "" {
			port, err := parsePort(s)
			if err != nil {
				return t, fmt.Errorf("%w: %s: %v", errBadTarget, HeaderSandboxPort, err)
			}
			t.port = port
		}
		return t, nil
	}
	if t, ok := p.hostTarget(r.Host); ok {
		return t, nil
	}
	if isSignedFiles(r) {
		return p.signedTarget(ctx, r)
	}
	return target{}, fmt.Errorf("%w: no %s header and Host %q is not {port}-{id}.%s", errBadTarget, HeaderSandboxID, r.Host, p.cfg.Domain)
}

// hostTarget parses a Host of the form {port}-{id}.{domain}[:listen port].
func (p *Proxy) hostTarget(host string) (target, bool) {
	if p.cfg.Domain == "" || host == "" {
		return target{}, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+strings.ToLower(p.cfg.Domain))
	if !ok || strings.Contains(label, ".") {
		return target{}, false
	}
	portStr, id, ok := strings.Cut(label, "-")
	if !ok || !validID(id) {
		return target{}, false
	}
	port, err := parsePort(portStr)
	if err != nil {
		return target{}, false
	}
	return target{id: id, port: port}, true
}

// isSignedFiles says r is a /files URL with a signature: the SDKs' download and upload
// URLs of a secure sandbox, which carry no sandbox id.
func isSignedFiles(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Get("signature") != ""
}

// signedTarget finds the secure sandbox whose access token makes the URL's signature valid.
// Expiry is envd's to check (it answers E2B's exact message); here the signature only
// picks the sandbox.
func (p *Proxy) signedTarget(ctx context.Context, r *http.Request) (target, error) {
	q := r.URL.Query()
	var op string
	switch r.Method {
	case http.MethodGet:
		op = "read"
	case http.MethodPost:
		op = "write"
	default:
		return target{}, fmt.Errorf("%w: %s is not GET or POST", errNoSigned, r.Method)
	}
	sig := []byte(q.Get("signature"))
	for _, sb := range p.cfg.Backend.SecureSandboxes(ctx) {
		if sb.EnvdAccessToken == "" {
			continue
		}
		want := Sign(q.Get("path"), op, q.Get("username"), sb.EnvdAccessToken, q.Get("signature_expiration"))
		if subtle.ConstantTimeCompare(sig, []byte(want)) == 1 {
			return target{id: sb.ID, port: EnvdPort, signed: true}, nil
		}
	}
	return target{}, fmt.Errorf("%w: no running or paused secure sandbox signed %s of path %q", errNoSigned, op, q.Get("path"))
}

// Sign returns the v1 signature of a /files URL as the E2B SDKs make it:
// "v1_" + base64 (no padding) of sha256("<path>:<read|write>:<user>:<token>[:<expiration>]"),
// with path, user and expiration exactly as in the query ("" expiration: none).
func Sign(path, op, user, token, expiration string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// validID accepts E2B's ids (i + 20 of [a-z0-9]) and any other [a-z0-9]+, with "-" and "_"
// for good measure; nothing that could confuse the "{id}:{port}" pool key.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func parsePort(s string) (int, error) {
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("port %q is not 1..65535", s)
	}
	return port, nil
}
