package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/control/vault"
)

// TLS: `cove server --tls-cert F --tls-key K` serves the API, the console and every sandbox
// host ({port}-{id}.{domain}) over TLS, HTTP/2 included, with the operator's certificate (a
// wildcard one for *.{domain} and {domain}). `--tls-self-signed` makes a CA on first run and
// a certificate from it at every start for *.{domain}, {domain}, localhost and the listen
// address: trust the CA (its path is printed; NODE_EXTRA_CA_CERTS, curl --cacert) and the SDKs'
// https sandbox hosts work on a laptop or in a test.
//
// The CA's key is sealed (internal/control/vault) under <data>/tls; its certificate is
// <data>/tls/ca.pem.

// DefaultTLSDomain is the sandbox domain of a TLS server without --domain: a name under
// localhost (curl and browsers send *.localhost to loopback) with two labels, since TLS
// clients refuse a wildcard certificate for *.localhost, a top-level name.
const DefaultTLSDomain = "cove.localhost"

// caKeyName is the CA key's name in the TLS vault.
const caKeyName = "ca-key"

// CAFile is where a self-signed server keeps its CA certificate.
func CAFile(data string) string { return filepath.Join(data, "tls", "ca.pem") }

// tlsOn says the server serves TLS.
func (c Config) tlsOn() bool { return c.TLSSelfSigned || c.TLSCert != "" }

// checkTLSFlags refuses a half or double TLS configuration.
func checkTLSFlags(c Config) error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case c.TLSSelfSigned && c.TLSCert != "":
		return errors.New("--tls-self-signed makes its own certificate: leave out --tls-cert and --tls-key")
	}
	return nil
}

// serverTLS is the TLS configuration for a server whose sandbox domain is domain (without a
// port) listening on addr: the operator's certificate, or one from the data dir's CA.
func serverTLS(c Config, domain string, addr net.Addr) (*tls.Config, error) {
	if err := checkTLSFlags(c); err != nil {
		return nil, err
	}
	var cert tls.Certificate
	var err error
	if c.TLSCert != "" {
		cert, err = tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", c.TLSCert, c.TLSKey, err)
		}
	} else {
		ca, caKey, err := loadOrMakeCA(c.DataDir)
		if err != nil {
			return nil, fmt.Errorf("self-signed TLS: %w", err)
		}
		if cert, err = issue(ca, caKey, domain, addr); err != nil {
			return nil, fmt.Errorf("self-signed TLS: %w", err)
		}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// loadOrMakeCA returns the data dir's CA, making it on first use.
func loadOrMakeCA(data string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	dir := filepath.Dir(CAFile(data))
	v, err := vault.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	certPEM, certErr := os.ReadFile(CAFile(data))
	sealed, keyErr := v.Get(caKeyName)
	if certErr == nil && keyErr == nil && len(sealed) == 1 {
		return parseCA(certPEM, []byte(sealed[0]))
	}
	if certErr != nil && !errors.Is(certErr, os.ErrNotExist) {
		return nil, nil, certErr
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Cove self-signed CA", Organization: []string{"Cove"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := v.Put(caKeyName, []string{string(keyPEM)}); err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(CAFile(data), certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("the CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// issue makes a server certificate from the CA for *.domain, domain, localhost and addr's IP
// (with loopback's).
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, domain string, addr net.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: domain, Organization: []string{"Cove"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{domain, "*." + domain, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() && !tcp.IP.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, tcp.IP)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
