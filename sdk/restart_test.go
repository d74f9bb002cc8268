package cove

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// freePort returns a loopback address nothing listens on (yet).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestARestartingServerIsARetryableError(t *testing.T) {
	t.Run("a call made while the server restarts goes through once it is back", func(t *testing.T) {
		addr := freePort(t)
		back := make(chan struct{})
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"sandboxID":"ia","templateID":"base","state":"running"}`))
		})}
		t.Cleanup(func() { _ = srv.Close() })
		// The server comes back a moment after the call starts: the call must not fail meanwhile.
		refused := make(chan struct{})
		go func() {
			<-refused
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("listen again on %s: %v", addr, err)
				return
			}
			close(back)
			_ = srv.Serve(ln)
		}()
		c := NewClient(Config{APIURL: "http://" + addr, APIKey: "k", RestartWait: 20 * time.Second,
			HTTPClient: &http.Client{Transport: &refusalSpy{base: http.DefaultTransport, refused: refused}}})
		info, err := c.Info(context.Background(), "ia")
		if err != nil {
			t.Fatalf("info across a restart: %v", err)
		}
		<-back
		if info.SandboxID != "ia" {
			t.Errorf("info %+v", info)
		}
	})
	t.Run("a server that stays down fails the call with ErrUnavailable after RestartWait", func(t *testing.T) {
		c := NewClient(Config{APIURL: "http://" + freePort(t), APIKey: "k", RestartWait: 300 * time.Millisecond})
		_, err := c.Info(context.Background(), "ia")
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("info from a server that is down: %v, want ErrUnavailable", err)
		}
	})
}

// refusalSpy closes refused once the first connection was refused.
type refusalSpy struct {
	base    http.RoundTripper
	refused chan struct{}
	once    bool
}

func (s *refusalSpy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err != nil && !s.once {
		s.once = true
		close(s.refused)
	}
	return resp, err
}
