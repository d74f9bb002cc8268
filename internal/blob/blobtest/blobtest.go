// Package blobtest starts a real S3-compatible server (versitygw, posix backend on a temp dir)
// on loopback for tests of the blob store and of a cluster. The server is the pinned versitygw
// that `make deps` installs into bin/; a test that cannot find it skips, saying so.
package blobtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Version is the pinned versitygw that scripts/deps.sh installs.
const Version = "v1.8.0"

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	Access   string
	Secret   string
	Root     string // the posix backend's root: each directory under it is a bucket
}

// Binary finds versitygw: $COVE_VERSITYGW, bin/versitygw of the repository, or PATH.
func Binary() (string, error) {
	if p := os.Getenv("COVE_VERSITYGW"); p != "" {
		return p, nil
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if p := filepath.Join(repo, "bin", "versitygw"); fileExists(p) {
		return p, nil
	}
	return exec.LookPath("versitygw")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start runs versitygw for the test on a free loopback port (or on addr when not "") with one
// bucket, bucket, made; it stops with the test. Credentials are set in the test's
// environment as the standard AWS variables, which is how Cove reads them.
func Start(t testing.TB, addr, bucket string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("no versitygw %s (make deps installs it into bin/): %v", Version, err)
	}
	if addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
	}
	s := &Server{Endpoint: "http://" + addr, Access: "coveaccess", Secret: "covesecret-0123456789", Root: t.TempDir()}
	if bucket != "" {
		if err := os.Mkdir(filepath.Join(s.Root, bucket), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "--access", s.Access, "--secret", s.Secret, "--port", addr, "posix", s.Root)
	logPath := filepath.Join(t.TempDir(), "versitygw.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("versitygw's log (the last 4 KiB):\n%s", b[max(0, len(b)-4096):])
			}
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", s.Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
	t.Setenv("AWS_REGION", "us-east-1")
	return s
}

// URL is the --objects address of the server's bucket.
func (s *Server) URL(bucket string) string {
	return fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1", bucket, s.Endpoint)
}
