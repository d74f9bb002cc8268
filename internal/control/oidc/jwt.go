package oidc

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
)

// alg is the one signing algorithm: ECDSA on P-256 with SHA-256 (RFC 7518 §3.4), which
// JWT-SVID and every common relying party accept.
const alg = "ES256"

// Claims are a token's payload (RFC 7519 §4.1).
type Claims struct {
	Issuer    string `json:"iss"`
	Subject   string `json:"sub"`
	Audience  string `json:"aud"`
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expiry    int64  `json:"exp"`
	ID        string `json:"jti"`
}

// header is a token's JOSE header.
type header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
	Kid string `json:"kid"`
}

var b64 = base64.RawURLEncoding

// sign returns the compact JWS of claims, signed with key under kid.
func sign(key *ecdsa.PrivateKey, kid string, c Claims) (string, error) {
	h, err := json.Marshal(header{Alg: alg, Typ: "JWT", Kid: kid})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	digest := sha256.Sum256([]byte(input))
	der, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	// JWS carries the signature as R || S, each 32 bytes (RFC 7518 §3.4), not ASN.1.
	var rs struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(der, &rs); err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	sig := make([]byte, 64)
	rs.R.FillBytes(sig[:32])
	rs.S.FillBytes(sig[32:])
	return input + "." + b64.EncodeToString(sig), nil
}

// JWK is one public key of a JWKS (RFC 7517), as relying parties fetch it.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
}

// JWKS is the issuer's published key set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// jwkOf is pub's JWK under kid.
func jwkOf(kid string, pub *ecdsa.PublicKey) (JWK, error) {
	raw, err := pub.Bytes() // 0x04 || X || Y
	if err != nil || len(raw) != 65 {
		return JWK{}, fmt.Errorf("key %s: not an uncompressed P-256 point: %v", kid, err)
	}
	return JWK{Kty: "EC", Crv: "P-256", X: b64.EncodeToString(raw[1:33]), Y: b64.EncodeToString(raw[33:]), Kid: kid, Use: "sig", Alg: alg}, nil
}
