package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	cove "github.com/cove-dev/cove/sdk"
)

// curl runs curl in the sandbox and returns its stdout and exit code.
func curl(t *testing.T, sb *cove.Sandbox, args string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sb.Commands.Run(ctx, "curl -sS --max-time 5 "+args)
	var exit *cove.CommandExitError
	switch {
	case errors.As(err, &exit):
		return res.Stdout + res.Stderr, exit.ExitCode
	case err != nil:
		t.Fatalf("curl %s: %v", args, err)
	}
	return res.Stdout, 0
}

func TestSandboxEgress(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--network-dns", in.DNS().String()}})
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	ctx := context.Background()
	newSandbox := func(t *testing.T, opts cove.SandboxOptions) *cove.Sandbox {
		t.Helper()
		sb, err := c.Create(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Kill(context.Background()) })
		return sb
	}
	open := newSandbox(t, cove.SandboxOptions{})
	closed := newSandbox(t, cove.SandboxOptions{NoInternet: true})

	t.Run("a sandbox reaches the test host by address and by name, through NAT", func(t *testing.T) {
		if out, code := curl(t, open, in.URL("http", "/by-address")); code != 0 || !strings.Contains(out, "hello") {
			t.Fatalf("curl exited %d: %s", code, out)
		}
		if out, code := curl(t, open, "http://web.test/by-name"); code != 0 || !strings.Contains(out, "hello from web.test") {
			t.Fatalf("curl exited %d: %s", code, out)
		}
		for _, r := range in.Requests() {
			if host, _, _ := net.SplitHostPort(r.RemoteAddr); host != in.Gateway.String() {
				t.Errorf("the test host saw %s, not the host's address %s", r.RemoteAddr, in.Gateway)
			}
		}
	})
	t.Run("getInfo reports internet access as it is", func(t *testing.T) {
		for _, tc := range []struct {
			sb   *cove.Sandbox
			want bool
		}{{open, true}, {closed, false}} {
			info, err := tc.sb.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.AllowInternetAccess != tc.want {
				t.Errorf("%s: allowInternetAccess %v, want %v", tc.sb.ID, info.AllowInternetAccess, tc.want)
			}
		}
	})
	t.Run("the listing reports internet access as it is", func(t *testing.T) {
		var list []struct {
			SandboxID           string `json:"sandboxID"`
			AllowInternetAccess bool   `json:"allowInternetAccess"`
		}
		getJSON(t, s, "/v2/sandboxes", &list)
		seen := map[string]bool{}
		for _, l := range list {
			seen[l.SandboxID] = l.AllowInternetAccess
		}
		if on, off := seen[open.ID], seen[closed.ID]; !on || off {
			t.Fatalf("listing: %+v", list)
		}
	})
	t.Run("a sandbox created without internet access reaches nothing", func(t *testing.T) {
		if out, code := curl(t, closed, in.URL("http", "/")); code == 0 {
			t.Fatalf("curl succeeded: %s", out)
		}
	})
	t.Run("the refused connection becomes a network.denied event naming destination, port and rule", func(t *testing.T) {
		waitFor(t, func() (string, bool) {
			var evs []struct {
				EventData struct {
					Destination string `json:"destination"`
					Port        int    `json:"port"`
					Rule        string `json:"rule"`
					Packets     int    `json:"packets"`
				} `json:"eventData"`
			}
			getJSON(t, s, "/events/sandboxes/"+closed.ID+"?type=sandbox.network.denied", &evs)
			for _, e := range evs {
				d := e.EventData
				if d.Destination == in.Addr.String() && d.Port == 80 && d.Rule == "allowInternetAccess false" && d.Packets > 0 {
					return "", true
				}
			}
			return fmt.Sprintf("%+v", evs), false
		})
	})
	t.Run("cove explain says which command failed because of which rule", func(t *testing.T) {
		out := waitFor(t, func() (string, bool) {
			out := coveCLI(t, s, "explain", closed.ID)
			if !strings.Contains(out, "exited 7") {
				out = strings.TrimSpace(out[strings.Index(out, "\n")+1:])
			}
			return out, strings.Contains(out, "exited 7: ") &&
				strings.Contains(out, "to "+in.Addr.String()+":80/tcp denied by allowInternetAccess false")
		})
		t.Log(out)
	})
	if t.Failed() {
		t.Log(coveCLI(t, s, "commands", closed.ID, "--json"))
		t.Log(coveCLI(t, s, "events", closed.ID, "--json"))
	}
	t.Run("an update opens one host to the closed sandbox and getInfo echoes it", func(t *testing.T) {
		err := closed.UpdateNetwork(ctx, cove.NetworkUpdate{NoInternet: true, AllowOut: []string{in.Other.String()}})
		if err != nil {
			t.Fatal(err)
		}
		if out, code := curl(t, closed, "http://"+in.Other.String()+"/"); code != 0 {
			t.Fatalf("allowed host: curl exited %d: %s", code, out)
		}
		if out, code := curl(t, closed, in.URL("http", "/")); code == 0 {
			t.Fatalf("a host outside allowOut answered: %s", out)
		}
		info, err := closed.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Network == nil || fmt.Sprint(info.Network.AllowOut) != "["+in.Other.String()+"/32]" {
			t.Errorf("getInfo network = %+v, want allowOut [%s/32]", info.Network, in.Other)
		}
	})
	t.Run("the sandbox reaches neither Cove's API and proxy port nor another sandbox", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
		if _, err := open.Commands.Run(ctx, "python3 -m http.server 8080 >/dev/null 2>&1 &"); err != nil {
			t.Fatal(err)
		}
		openInfo, _ := open.Commands.Run(ctx, "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1")
		openAddr := strings.TrimSpace(openInfo.Stdout)
		gw, _ := open.Commands.Run(ctx, "ip route show default | awk '{print $3}'")
		if openAddr == "" || strings.TrimSpace(gw.Stdout) == "" {
			t.Fatalf("the sandbox has no address (%q) or gateway (%q)", openAddr, gw.Stdout)
		}
		for _, target := range []string{
			"http://" + strings.TrimSpace(gw.Stdout) + ":" + port + "/health", // the host, through the gateway
			"http://" + in.Gateway.String() + ":" + port + "/health",          // the host, another address
			"http://" + openAddr + ":8080/",                                   // the other sandbox
		} {
			if out, code := curl(t, closed, "--connect-timeout 2 "+target); code == 0 {
				t.Errorf("%s answered: %s", target, out)
			}
		}
		if out, code := curl(t, open, "--retry 20 --retry-connrefused --retry-delay 0 http://127.0.0.1:8080/"); code != 0 {
			t.Errorf("the sandbox's own server does not answer inside it (the test could not fail): %d %s", code, out)
		}
	})
	t.Run("the CLI creates with rules, shows them and replaces them", func(t *testing.T) {
		id := strings.TrimSpace(coveCLI(t, s, "sandbox", "create", "--deny-out", "0.0.0.0/0", "--allow-out", in.Other.String()))
		t.Cleanup(func() { _ = c.Kill(context.Background(), id) })
		info := coveCLI(t, s, "sandbox", "info", id)
		if !strings.Contains(info, "allow "+in.Other.String()+"/32; deny 0.0.0.0/0") {
			t.Errorf("info does not show the rules:\n%s", info)
		}
		sb, err := c.Connect(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if out, code := curl(t, sb, in.URL("http", "/")); code == 0 {
			t.Fatalf("a denied host answered: %s", out)
		}
		coveCLI(t, s, "sandbox", "network", id)
		if out, code := curl(t, sb, in.URL("http", "/")); code != 0 {
			t.Fatalf("after clearing the rules: curl exited %d: %s", code, out)
		}
		if info := coveCLI(t, s, "sandbox", "info", id); !strings.Contains(info, "no rules") {
			t.Errorf("info after clearing:\n%s", info)
		}
	})
	t.Run("the CLI makes a sandbox with private ports and prints its traffic token", func(t *testing.T) {
		var out struct {
			SandboxID          string `json:"sandboxID"`
			TrafficAccessToken string `json:"trafficAccessToken"`
		}
		if err := json.Unmarshal([]byte(coveCLI(t, s, "sandbox", "create", "--private-ports", "--json")), &out); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Kill(context.Background(), out.SandboxID) })
		if len(out.TrafficAccessToken) < 16 {
			t.Fatalf("create printed %+v", out)
		}
		cl := client{t: t, url: s.URL, key: s.Key}
		code, body, _ := cl.do(http.MethodGet, "/", nil, "E2b-Sandbox-Id", out.SandboxID, "E2b-Sandbox-Port", "8000")
		if code != http.StatusForbidden {
			t.Fatalf("a port without the token: %d %v", code, body)
		}
	})
	t.Run("bad network input is a 400 naming the field, and nothing is applied", func(t *testing.T) {
		cl := client{t: t, url: s.URL, key: s.Key}
		for _, tc := range []struct {
			name, method, path string
			body               any
			field              string
		}{
			{"a malformed CIDR at create", http.MethodPost, "/sandboxes", map[string]any{"templateID": "base",
				"network": map[string]any{"denyOut": []string{"10.0.0.0/33"}}}, "network.denyOut[0]"},
			{"an unknown network field at create", http.MethodPost, "/sandboxes", map[string]any{"templateID": "base",
				"network": map[string]any{"allowOutt": []string{"1.2.3.4"}}}, "allowOutt"},
			{"a malformed address in an update", http.MethodPut, "/sandboxes/" + closed.ID + "/network",
				map[string]any{"allowOut": []string{"1.2.3.4", "1.2.3.999"}}, "allowOut[1]"},
			{"more than 1000 rules", http.MethodPut, "/sandboxes/" + closed.ID + "/network",
				map[string]any{"denyOut": make1001()}, "1001 entries"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out, _ := cl.do(tc.method, tc.path, tc.body)
				msg, _ := out["message"].(string)
				if code != http.StatusBadRequest || !strings.Contains(msg, tc.field) {
					t.Fatalf("%d %q, want 400 naming %s", code, msg, tc.field)
				}
			})
		}
		// The refused updates left the last good policy in place.
		if out, code := curl(t, closed, "http://"+in.Other.String()+"/"); code != 0 {
			t.Fatalf("allowed host after refused updates: curl exited %d: %s", code, out)
		}
	})
}

func make1001() []string {
	out := make([]string, 1001)
	for i := range out {
		out[i] = fmt.Sprintf("198.18.%d.%d", i/250, i%250)
	}
	return out
}

// TestOfficialSDKNetwork runs test/compat/network.test.mjs: the official npm e2b SDK's
// network options against a server whose sandboxes reach a fake internet, on each runtime.
func TestOfficialSDKNetwork(t *testing.T) {
	covetest.EachRuntime(t, func(t *testing.T, _ runtime.Engine) {
		in := nettest.New(t)
		in.SetName("web.test", in.Addr)
		socks, _, err := in.StartSOCKS()
		if err != nil {
			t.Fatal(err)
		}
		caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
		if err := os.WriteFile(caFile, in.CAPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--network-dns", in.DNS().String(), "--network-upstream-ca", caFile}})
		covetest.RunSDKScenarios(t, "network.test.mjs", s.URL, s.Key,
			"COVE_TEST_HOST="+in.Addr.String(), "COVE_TEST_OTHER="+in.Other.String(), "COVE_TEST_NAME=web.test",
			"COVE_TEST_SOCKS="+socks.String(), "COVE_TEST_SOCKS_USER="+nettest.SOCKSUser, "COVE_TEST_SOCKS_PASSWORD="+nettest.SOCKSPassword)
		if c := in.SOCKSConnects(); len(c) == 0 {
			t.Error("the SOCKS5 proxy saw no connection")
		}
		if strings.Contains(s.Logs(), nettest.SOCKSPassword) {
			t.Error("the server's log holds the proxy password")
		}
		var sawSecret, sawToken bool
		for _, r := range in.Requests() {
			sawSecret = sawSecret || (r.Path == "/secret" && strings.HasSuffix(r.Header.Get("X-Api-Key"), "-planted") && r.TLS)
			if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && r.Path == "/identity" && r.TLS {
				claims, err := verifyAgainstIssuer(s.URL, token)
				if err != nil || claims.Aud != "web.test" {
					t.Errorf("the identity token the npm SDK's rule named does not verify against Cove's key set: %+v %v", claims, err)
				}
				sawToken = true
			}
		}
		if !sawSecret {
			t.Error("the test host never saw the secret's value in X-Api-Key over HTTPS")
		}
		if !sawToken {
			t.Error("the test host never saw the workload identity token the npm SDK's iam and rule asked for")
		}
	})
}

// TestHeaderRuleSecretNeverEntersTheSandbox: a team secret, created through the CLI from
// stdin, is named by a header rule's placeholder; Cove's egress proxy puts it into the
// sandbox's HTTPS requests on the host side. The test host sees it; nothing in the sandbox
// nor in any of Cove's stores holds it.
func TestHeaderRuleSecretNeverEntersTheSandbox(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, in.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--network-dns", in.DNS().String(), "--network-upstream-ca", caFile}})
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	ctx := context.Background()
	// Two halves, so that no command line, file or output of the test holds the whole.
	const half1, half2 = "planted-7c1e", "-2b9d-secret"
	secret := "Bearer " + half1 + half2
	create := exec.Command(covetest.Binary(t), "secret", "create", "Web-Token")
	create.Env = append(os.Environ(), "COVE_API_URL="+s.URL, "COVE_API_KEY="+s.Key)
	create.Stdin = strings.NewReader(half1 + half2 + "\n")
	if out, err := create.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "sec_") {
		t.Fatalf("cove secret create: %v: %s", err, out)
	}
	if out := coveCLI(t, s, "secret", "list"); !strings.Contains(out, "web-token") || strings.Contains(out, half1+half2) {
		t.Fatalf("cove secret list:\n%s", out)
	}
	header := "Bearer " + cove.SecretPlaceholder("web-token")
	sb, err := c.Create(ctx, cove.SandboxOptions{Network: &cove.NetworkRules{
		Rules: map[string][]cove.Rule{"web.test": {{Transform: cove.Transform{Headers: map[string]string{"Authorization": header}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })

	t.Run("curl https://web.test/ in the sandbox reaches the test host with the header", func(t *testing.T) {
		if out, code := curl(t, sb, "https://web.test/with-rule"); code != 0 {
			t.Fatalf("curl exited %d: %s", code, out)
		}
		reqs := in.Requests()
		if got := reqs[len(reqs)-1]; got.Header.Get("Authorization") != secret || !got.TLS {
			t.Fatalf("the test host saw %+v", got)
		}
	})
	t.Run("env, /proc and the files of the sandbox do not hold it", func(t *testing.T) {
		script := fmt.Sprintf(`printf '%%s%%s' '%s' '%s' > /dev/shm/p; `+
			`(env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n'; `+
			`grep -rIsl -F -f /dev/shm/p /etc /home /tmp /root /var /usr/local /.cove 2>/dev/null) | grep -c -F -f /dev/shm/p`, half1, half2)
		res, err := sb.Commands.Run(ctx, script)
		var exit *cove.CommandExitError
		if !errors.As(err, &exit) || exit.ExitCode != 1 || strings.TrimSpace(res.Stdout) != "0" {
			t.Fatalf("the secret is visible in the sandbox: %v, stdout %q", err, res.Stdout)
		}
	})
	t.Run("no store of Cove holds it", func(t *testing.T) {
		for name, text := range collected(t, s, sb.ID) {
			if strings.Contains(text, half1+half2) {
				t.Errorf("%s holds the secret", name)
			}
		}
		if strings.Contains(s.Logs(), half1+half2) {
			t.Error("the server's output holds the secret")
		}
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h := info.Network.Rules["web.test"]; len(h) != 1 || h[0].Transform.Headers["Authorization"] != "***" {
			t.Errorf("getInfo rules = %+v, want the header name with *** for its value", info.Network.Rules)
		}
		// The secret store is the database, values sealed by the vault: no file of the data
		// dir (the database and its WAL included) holds the value in the clear.
		_ = filepath.WalkDir(s.DataDir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), half1+half2) {
				t.Errorf("%s holds the secret in the clear", path)
			}
			return nil
		})
	})
	t.Run("a rule naming a secret that does not exist fails the request instead of sending the placeholder", func(t *testing.T) {
		err := sb.UpdateNetwork(ctx, cove.NetworkUpdate{Rules: map[string][]cove.Rule{"web.test": {{Transform: cove.Transform{
			Headers: map[string]string{"Authorization": cove.SecretPlaceholder("missing")}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		before := len(in.Requests())
		if out, code := curl(t, sb, "-f https://web.test/missing"); code == 0 {
			t.Fatalf("curl succeeded: %s", out)
		}
		if len(in.Requests()) != before {
			t.Fatal("the request reached the test host")
		}
	})
}

// TestNetworkOff: with --network=false every sandbox is loopback only and says so.
func TestNetworkOff(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--network=false"}})
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	ctx := context.Background()
	sb, err := c.Create(ctx, cove.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })
	t.Run("a sandbox that asked for internet access reports it has none", func(t *testing.T) {
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.AllowInternetAccess {
			t.Fatal("allowInternetAccess is true on a server without networking")
		}
	})
	t.Run("it has a loopback interface only", func(t *testing.T) {
		res, err := sb.Commands.Run(ctx, "ip -o link | awk -F': ' '{print $2}'")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(res.Stdout) != "lo" {
			t.Fatalf("links: %q", res.Stdout)
		}
	})
	t.Run("an update of its network is a 409 that says why", func(t *testing.T) {
		err := sb.UpdateNetwork(ctx, cove.NetworkUpdate{DenyOut: []string{cove.AllTraffic}})
		var e *cove.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "--network=false") {
			t.Fatalf("%v, want a 409 naming --network=false", err)
		}
	})
}
