// Package redteam attacks a real `cove server` the way issue 23's red team did, class by
// class (template names, image cache, header-rule exfiltration, interceptor destinations,
// DNS, pull SSRF, credential forwarding, resource bounds, and the floor: malformed requests
// and cross-tenant probes), and prints per class how many probes were tried and how many
// held. Each probe asserts the secure behaviour; one that does not hold fails its test.
//
// It runs only with COVE_REDTEAM=1 (make redteam): one server with two teams is started for
// the whole package, on a template store of its own, with a fake internet (198.18.0.0/15)
// and a resolver of its own that counts the queries it receives. The template-name class
// starts a server per name, since a name that works breaks the store for what follows.
// Every server runs its sandboxes on the engine COVE_RUNTIME names (runc when unset;
// runsc, gVisor, needs bin/runsc): make redteam runs the package once per engine.
//
// One test per class, for -run (make redteam RUN=...): TestTemplateNames, TestImageCache,
// TestHeaderRuleExfiltration, TestInterceptorDestinations, TestDNS, TestPullSSRF,
// TestCredentialForwarding, TestResourceBounds, TestFloorMalformedRequests, TestFloorEnvd,
// TestFloorCrossTenant and TestPlantedSecrets (which reads every answer the others got).
package redteam

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build/oci/ocitest"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	"github.com/cove-dev/cove/templates"
)

// env is what every class attacks: the server, its two teams and the fake internet.
var env struct {
	skip     string // why the package skips; "" when the server is up
	engine   string // the engine the servers run sandboxes on (COVE_RUNTIME)
	bin      string
	server   *covetest.Process
	keyA     string // the server's first team: the victim
	teamA    string
	keyB     string // a second team: the attacker
	teamB    string
	in       *nettest.Internet // web.test resolves to in.Addr
	resolver *resolver         // on in.Other:53, the server's --network-dns
	apiPort  string
}

// Classes, in the order the summary prints them.
const (
	classTemplateNames = "template names"
	classImageCache    = "image cache"
	classHeaderRules   = "header-rule exfiltration"
	classInterceptor   = "interceptor destinations"
	classDNS           = "DNS"
	classPullSSRF      = "pull SSRF"
	classCredentials   = "credential forwarding"
	classBounds        = "resource bounds"
	classMalformed     = "floor: malformed REST requests"
	classCrossTenant   = "floor: cross-tenant probes"
	classPlanted       = "floor: planted secrets"
)

var classOrder = []string{classTemplateNames, classImageCache, classHeaderRules, classInterceptor, classDNS,
	classPullSSRF, classCredentials, classBounds, classMalformed, classEnvd, classCrossTenant, classPlanted}

// tally counts probes per class.
var tally = struct {
	sync.Mutex
	tried, held map[string]int
}{tried: map[string]int{}, held: map[string]int{}}

// probe records one probe of class: it held or it did not (then t fails, saying why).
func probe(t *testing.T, class, name string, held bool, why string) {
	t.Helper()
	tally.Lock()
	tally.tried[class]++
	if held {
		tally.held[class]++
	}
	tally.Unlock()
	if !held {
		t.Errorf("%s: did not hold: %s: %s", class, name, why)
	}
}

// report logs the class's figures so far; each class test ends with it.
func report(t *testing.T, class string) {
	tally.Lock()
	defer tally.Unlock()
	t.Logf("%s: tried %d, held %d", class, tally.tried[class], tally.held[class])
}

func summary() string {
	tally.Lock()
	defer tally.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "==> red team summary (runtime %s)\n", env.engine)
	tried, held := 0, 0
	for _, c := range classOrder {
		if tally.tried[c] == 0 {
			fmt.Fprintf(&b, "    %s: not run\n", c)
			continue
		}
		mark := "held"
		if tally.held[c] != tally.tried[c] {
			mark = "NOT HELD"
		}
		fmt.Fprintf(&b, "    %s: tried %d, held %d (%s)\n", c, tally.tried[c], tally.held[c], mark)
		tried, held = tried+tally.tried[c], held+tally.held[c]
	}
	fmt.Fprintf(&b, "    all: tried %d, held %d\n", tried, held)
	// The plain closing line a CI summary reads: a probe that held passed.
	fmt.Fprintf(&b, "redteam: %d passed, %d failed\n", held, tried-held)
	return b.String()
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if os.Getenv("COVE_REDTEAM") == "" {
		env.skip = "set COVE_REDTEAM=1 or run make redteam"
		return m.Run()
	}
	if r := covetest.SkipReason(); r != "" {
		env.skip = r
		return m.Run()
	}
	if os.Geteuid() != 0 {
		env.skip = "needs root"
		return m.Run()
	}
	if env.skip = useEngine(); env.skip != "" {
		return m.Run()
	}
	defer runtimetest.Cleanup()
	tmp, err := os.MkdirTemp("", "cove-redteam-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redteam:", err)
		return 1
	}
	cleanups, err := setup(tmp)
	cleanups = append([]func(){func() { removeData(tmp) }}, cleanups...)
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redteam: set up:", err)
		if env.server != nil {
			covetest.PrintLog(os.Stderr, env.server.LogPath, 200)
		}
		return 1
	}
	fmt.Fprintf(os.Stderr, "redteam: cove server at %s (runtime %s), data %s, log %s\n", env.server.URL, env.engine, env.server.DataDir, env.server.LogPath)
	code := m.Run()
	fmt.Print(summary())
	if code != 0 && os.Getenv("COVE_REDTEAM_LOG") != "" {
		covetest.PrintLog(os.Stderr, env.server.LogPath, 400)
	}
	return code
}

// useEngine makes every server the package starts run its sandboxes on the engine
// COVE_RUNTIME names (runc when unset), and says why the package skips when it cannot. The
// servers' cove is built here, not in bin/, so runsc comes from bin/ put first on PATH.
func useEngine() (skip string) {
	e, err := runtime.ParseEngine(os.Getenv(covetest.RuntimeEnv)) // "" is runc
	if err != nil {
		return err.Error()
	}
	env.engine = e.String()
	if e == runtime.EngineRunsc {
		p := runtimetest.RunscPath()
		if p == "" {
			return "no bin/runsc (scripts/runsc.sh builds the pinned gVisor; make test does)"
		}
		os.Setenv("PATH", filepath.Dir(p)+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	os.Setenv(covetest.RuntimeEnv, env.engine)
	return ""
}

// removeData detaches the volumes' images the server left mounted, then removes tmp.
func removeData(tmp string) {
	mnts, _ := filepath.Glob(filepath.Join(tmp, "data", "volumes", "vol-*", "data"))
	for _, mnt := range mnts {
		if err := runtime.UnmountDisk(mnt); err != nil {
			fmt.Fprintf(os.Stderr, "redteam: unmount %s: %v\n", mnt, err)
			return
		}
	}
	_ = os.RemoveAll(tmp)
}

// setup starts the fake internet, the resolver and the server with two teams.
func setup(tmp string) (cleanups []func(), err error) {
	if env.bin, err = covetest.BuildBinary(tmp); err != nil {
		return nil, err
	}
	in, err := nettest.Build()
	if err != nil {
		return nil, err
	}
	env.in = in
	cleanups = append(cleanups, in.Close)
	in.SetName("web.test", in.Addr)
	env.resolver, err = startResolver(in)
	if err != nil {
		return cleanups, err
	}
	cleanups = append(cleanups, env.resolver.close)
	caFile := filepath.Join(tmp, "upstream-ca.pem")
	if err := os.WriteFile(caFile, in.CAPEM, 0o600); err != nil {
		return cleanups, err
	}
	// A template store of the package's own whose base is the shared one: the template-name
	// class builds templates with the store's own names in it.
	own := filepath.Join(tmp, "templates")
	if err := template.Link(own, covetest.TemplatesDir(), templates.BaseName); err != nil {
		return cleanups, err
	}
	data := filepath.Join(tmp, "data")
	p, err := covetest.LaunchWith(env.bin, data, filepath.Join(tmp, "server.log"), "--templates", own,
		"--network-dns", netip.AddrPortFrom(in.Other, 53).String(), "--network-upstream-ca", caFile, "--log-level", "debug")
	if err != nil {
		return cleanups, err
	}
	env.server = p
	cleanups = append(cleanups, func() { _ = p.Stop() })
	env.keyA = p.Key
	_, env.apiPort, _ = net.SplitHostPort(strings.TrimPrefix(p.URL, "http://"))
	var teams []struct {
		TeamID string `json:"teamID"`
	}
	if code, body := call(env.keyA, http.MethodGet, "/teams", nil, &teams); code != http.StatusOK || len(teams) == 0 {
		return cleanups, fmt.Errorf("GET /teams: %d %s", code, body)
	}
	env.teamA = teams[0].TeamID
	out, err := cli("team", "create", "rt-attacker")
	if err != nil {
		return cleanups, err
	}
	env.teamB = strings.TrimSpace(out)
	if out, err = cli("apikey", "create", "rt-b", "--team", env.teamB); err != nil {
		return cleanups, err
	}
	env.keyB = strings.Fields(out)[0]
	return cleanups, nil
}

// need skips t unless the server is up.
func need(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip("redteam: " + env.skip)
	}
}

// cli runs the cove CLI against the server's data dir.
func cli(args ...string) (string, error) {
	cmd := exec.Command(env.bin, args...)
	cmd.Env = append(os.Environ(), "COVE_DATA="+env.server.DataDir, "COVE_API_URL="+env.server.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cove %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var httpClient = &http.Client{Timeout: 2 * time.Minute}

// call sends in (JSON unless it is []byte or string) with key and decodes the answer into
// out when out is not nil; it returns the status (0 when the request failed) and the body.
func call(key, method, path string, in, out any) (int, string) {
	return callAt(env.server.URL, key, method, path, in, out, nil)
}

func callHeaders(key, method, path string, in, out any, h http.Header) (int, string) {
	return callAt(env.server.URL, key, method, path, in, out, h)
}

// callAt is call to the server at base with the headers h.
func callAt(base, key, method, path string, in, out any, h http.Header) (int, string) {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(v)
	case string:
		body = strings.NewReader(v)
	default:
		b, _ := json.Marshal(v)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		return 0, err.Error()
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if in != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	answers.see(method+" "+path, string(b)+fmt.Sprint(res.Header))
	if out != nil {
		_ = json.Unmarshal(b, out)
	}
	return res.StatusCode, string(b)
}

// planted are secret values the classes plant (a team secret, a header rule's value, the
// registry's password): no answer of the server may ever hold one.
var planted = []string{victimSecret, headerSecret, ocitest.Password}

// answerLog counts the server's answers and remembers those that held a planted secret.
type answerLog struct {
	mu    sync.Mutex
	seen  int
	leaks []string
}

var answers answerLog

func (a *answerLog) see(what, text string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen++
	for _, p := range planted {
		if strings.Contains(text, p) {
			a.leaks = append(a.leaks, what)
		}
	}
}

// resolver answers DNS on in.Other:53 (web.test and other.test, else NXDOMAIN) and records
// every name it is asked.
type resolver struct {
	mu    sync.Mutex
	names []string
	pc    net.PacketConn
}

func startResolver(in *nettest.Internet) (*resolver, error) {
	pc, err := nettest.ListenPacketIn(in.Netns, "udp", netip.AddrPortFrom(in.Other, 53).String())
	if err != nil {
		return nil, err
	}
	r := &resolver{pc: pc}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if ans := r.answer(buf[:n], in); ans != nil {
				_, _ = pc.WriteTo(ans, from)
			}
		}
	}()
	return r, nil
}

func (r *resolver) close() { r.pc.Close() }

func (r *resolver) answer(q []byte, in *nettest.Internet) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(question.Name.String())
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	addrs := map[string]netip.Addr{"web.test.": in.Addr, "other.test.": in.Other}
	a, ok := addrs[name]
	if !ok {
		b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RCode: dnsmessage.RCodeNameError})
	}
	_ = b.StartQuestions()
	_ = b.Question(question)
	if ok && question.Type == dnsmessage.TypeA {
		_ = b.StartAnswers()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: a.As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// asked returns how many queries the resolver received for names containing s.
func (r *resolver) asked(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, name := range r.names {
		if strings.Contains(name, s) {
			n++
		}
	}
	return n
}

// sortedKeys is m's keys in order, for stable probe names.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
