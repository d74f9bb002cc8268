package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{name: "a certificate without its key is refused", cfg: Config{TLSCert: "c.pem"}, want: "go together"},
		{name: "a key without its certificate is refused", cfg: Config{TLSKey: "k.pem"}, want: "go together"},
		{name: "self-signed beside a certificate is refused", cfg: Config{TLSSelfSigned: true, TLSCert: "c.pem", TLSKey: "k.pem"}, want: "leave out"},
		{name: "a certificate with its key is fine", cfg: Config{TLSCert: "c.pem", TLSKey: "k.pem"}},
		{name: "no TLS is fine", cfg: Config{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkTLSFlags(tt.cfg)
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("checkTLSFlags: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestSelfSignedTLS(t *testing.T) {
	data := t.TempDir()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3443}
	cfg, err := serverTLS(Config{DataDir: data, TLSSelfSigned: true}, DefaultTLSDomain, addr)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(CAFile(data))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, host string
		ok         bool
	}{
		{"a sandbox host under the domain verifies", "49983-iabc123.cove.localhost", true},
		{"the domain itself verifies", "cove.localhost", true},
		{"localhost verifies", "localhost", true},
		{"the loopback address verifies", "127.0.0.1", true},
		{"a host nested deeper does not", "a.49983-iabc123.cove.localhost", false},
		{"another domain does not", "49983-iabc123.example.test", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: tt.host, Roots: pool})
			if (err == nil) != tt.ok {
				t.Errorf("verify %s: %v, want ok %v", tt.host, err, tt.ok)
			}
		})
	}
	t.Run("the CA is made once and kept across starts", func(t *testing.T) {
		if _, err := serverTLS(Config{DataDir: data, TLSSelfSigned: true}, DefaultTLSDomain, addr); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(CAFile(data))
		if err != nil || !bytes.Equal(again, caPEM) {
			t.Errorf("the CA changed at the second start (%v)", err)
		}
	})
	t.Run("the CA's key is sealed, owner only", func(t *testing.T) {
		path := filepath.Join(filepath.Dir(CAFile(data)), caKeyName)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if fi.Mode().Perm() != 0o600 || bytes.Contains(b, []byte("PRIVATE KEY")) {
			t.Errorf("%s: mode %v, holds a PEM key in the clear: %v", path, fi.Mode().Perm(), bytes.Contains(b, []byte("PRIVATE KEY")))
		}
	})
	t.Run("an operator's certificate and key are served as given", func(t *testing.T) {
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
		keyDER, err := x509.MarshalECPrivateKey(cfg.Certificates[0].PrivateKey.(*ecdsa.PrivateKey))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := serverTLS(Config{TLSCert: certFile, TLSKey: keyFile}, "sbx.example.test", addr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Certificates[0].Certificate[0], leaf.Raw) {
			t.Error("the served certificate is not the operator's")
		}
		if _, err := serverTLS(Config{TLSCert: certFile, TLSKey: certFile}, "sbx.example.test", addr); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("a key file that is no key: %v, want an error naming --tls-cert", err)
		}
	})
}
