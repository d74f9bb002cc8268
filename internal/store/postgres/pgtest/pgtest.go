// Package pgtest starts a real PostgreSQL (Debian's 15, from /usr/lib/postgresql/15/bin) for
// tests of the PostgreSQL store and of a cluster: initdb as the postgres user on a temp
// directory, a server on loopback, a database per test. A machine without PostgreSQL or root
// skips, saying why.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bin is where Debian's PostgreSQL 15 keeps its programs.
const Bin = "/usr/lib/postgresql/15/bin"

// Server is a running PostgreSQL.
type Server struct {
	Addr string // host:port it listens on
	dir  string
}

var (
	shared     *Server
	sharedErr  error
	sharedOnce sync.Once
	dbSeq      atomic.Int64
)

// Shared starts one server for the test binary (stopped by Stop, which TestMain calls) or
// skips the test when the machine cannot run one.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = Start("127.0.0.1:0") })
	if sharedErr != nil {
		t.Skipf("no PostgreSQL for this test: %v", sharedErr)
	}
	return shared
}

// StopShared stops the server Shared started, if any: call it from TestMain after m.Run.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// Start initialises a cluster in a new temp directory and starts a server listening on addr
// ("IP:0" picks a free port). It needs root (to run PostgreSQL as its own user).
func Start(addr string) (*Server, error) {
	if _, err := os.Stat(filepath.Join(Bin, "initdb")); err != nil {
		return nil, fmt.Errorf("PostgreSQL 15 is not installed (%s): make deps installs it", Bin)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("starting PostgreSQL needs root (to run it as the postgres user)")
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		_, port, _ = net.SplitHostPort(l.Addr().String())
		l.Close()
	}
	dir, err := os.MkdirTemp("", "cove-pgtest-")
	if err != nil {
		return nil, err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort(host, port), dir: dir}
	asPG := func(name string, args ...string) error {
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(Bin, name)}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := asPG("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Tests on addresses other than loopback (cluster nodes in namespaces) reach it too.
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, _ = hba.WriteString("host all all 198.18.0.0/15 trust\n")
		hba.Close()
	}
	opts := fmt.Sprintf("-c listen_addresses=%s -p %s -k %s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
		host, port, dir)
	if err := asPG("pg_ctl", "-D", data, "-w", "-t", "30", "-l", filepath.Join(dir, "log"), "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return s, nil
}

// Stop stops the server at once and removes its directory.
func (s *Server) Stop() {
	cmd := exec.Command("runuser", "-u", "postgres", "--", filepath.Join(Bin, "pg_ctl"), "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	_ = cmd.Run()
	os.RemoveAll(s.dir)
}

// DSN is the address of database db on the server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr, db)
}

// NewDatabase makes an empty database of its own for the test and returns its DSN; it is
// dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbSeq.Add(1), strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())))
	if len(name) > 60 {
		name = name[:60]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, s.DSN("postgres")); err == nil {
			_, _ = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
			conn.Close(ctx)
		}
	})
	return s.DSN(name)
}

// StartFor starts a server of the test's own, stopped when it ends, or skips the test when
// the machine cannot run one: for a package without a TestMain to stop a shared server.
func StartFor(t testing.TB) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Skipf("no PostgreSQL for this test: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
