package cove

import (
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-dev/cove/sdk/envdapi"
)

// ErrNotSecure is DownloadURL's and UploadURL's error when SignatureExpiration is asked of
// an insecure sandbox, whose URLs carry no signature to expire.
var ErrNotSecure = errors.New("cove: signature expiration needs a secure sandbox")

// DownloadURL returns a URL that downloads one file of the sandbox with a plain GET, for a
// browser or another program: for a secure sandbox it is signed with the sandbox's access
// token and names no sandbox (the proxy finds it by the signature), so it works without
// an API key or headers. Options: User, SignatureExpiration.
func (s *Sandbox) DownloadURL(path string, opts ...Option) (string, error) {
	return s.fileURL(path, envdapi.SignRead, apply(opts))
}

// UploadURL returns a URL that writes one file of the sandbox with a POST of the file
// (multipart/form-data with a "file" part, or application/octet-stream), signed as
// DownloadURL's. Options: User, SignatureExpiration.
func (s *Sandbox) UploadURL(path string, opts ...Option) (string, error) {
	return s.fileURL(path, envdapi.SignWrite, apply(opts))
}

func (s *Sandbox) fileURL(path, op string, o *options) (string, error) {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if o.user != "" {
		q.Set("username", o.user)
	}
	if s.accessToken == "" {
		if o.signatureTTL != 0 {
			return "", &Error{Op: op + " url " + path, SandboxID: s.ID, Message: ErrNotSecure.Error(), Err: ErrNotSecure}
		}
		// Nothing to sign with: the URL names the sandbox in its host, E2B's
		// {port}-{id}.{domain} form, which only routes where that name resolves to Cove.
		u, err := url.Parse(s.client.cfg.SandboxURL)
		if err != nil {
			return "", &Error{Op: op + " url " + path, SandboxID: s.ID, Message: err.Error(), Err: err}
		}
		u.Host = strconv.Itoa(EnvdPort) + "-" + s.ID + "." + u.Host
		u.Path, u.RawQuery = "/files", q.Encode()
		return u.String(), nil
	}
	var exp int64
	if o.signatureTTL != 0 {
		exp = time.Now().Add(o.signatureTTL).Unix()
	}
	q.Set("signature", envdapi.Sign(path, op, o.user, s.accessToken, exp))
	if exp != 0 {
		q.Set("signature_expiration", strconv.FormatInt(exp, 10))
	}
	return s.client.cfg.SandboxURL + "/files?" + q.Encode(), nil
}
