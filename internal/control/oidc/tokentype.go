package oidc

import "fmt"

// TokenType is the kind of workload token a sandbox registers (E2B's tokenType): a closed set.
type TokenType string

// The token types.
const (
	// JWTSVID is a SPIFFE JWT-SVID: a JWT whose subject is the workload's SPIFFE ID.
	JWTSVID TokenType = "JWT-SVID"
)

// String returns the type's wire name.
func (t TokenType) String() string {
	if t == "" {
		return "unknown"
	}
	return string(t)
}

// ParseTokenType reads a wire name; anything but a known type is an error.
func ParseTokenType(s string) (TokenType, error) {
	switch TokenType(s) {
	case JWTSVID:
		return JWTSVID, nil
	}
	return "", fmt.Errorf("unknown token type %q (this server issues %s)", s, JWTSVID)
}
