package redteam

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/internal/builder/template/build/oci/ocitest"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	cove "github.com/cove-dev/cove/sdk"
)

// startBuild asks for a build of template name as key's team with def (E2B's
// TemplateBuildStartV2 body) and returns the template and build ids and the status of the
// call that was refused, if one was (0 when the build started).
func startBuild(base, key, name string, def map[string]any) (tid, bid string, refused int, body string) {
	var req struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	code, text := callAt(base, key, http.MethodPost, "/v3/templates", map[string]any{"name": name}, &req, nil)
	if code < 200 || code > 299 {
		return "", "", code, text
	}
	code, text = callAt(base, key, http.MethodPost, "/v2/templates/"+url.PathEscape(req.TemplateID)+"/builds/"+url.PathEscape(req.BuildID), def, nil, nil)
	if code < 200 || code > 299 {
		return req.TemplateID, req.BuildID, code, text
	}
	return req.TemplateID, req.BuildID, 0, text
}

// waitBuild follows a build to its end and returns its status (ready or error) and reason.
func waitBuild(base, key, tid, bid string, within time.Duration) (string, string) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var st cove.TemplateBuildStatus
		code, text := callAt(base, key, http.MethodGet, "/templates/"+url.PathEscape(tid)+"/builds/"+url.PathEscape(bid)+"/status", nil, &st, nil)
		if code != http.StatusOK {
			return "unknown", fmt.Sprintf("status answered %d %.200s", code, text)
		}
		if st.Status == "ready" || st.Status == "error" {
			reason := ""
			if st.Reason != nil {
				reason = st.Reason.Message
			}
			return st.Status, reason
		}
		time.Sleep(250 * time.Millisecond)
	}
	return "timeout", "the build did not end within " + within.String()
}

// createWorks says whether key's team can create a sandbox from template and run a command.
func createWorks(t *testing.T, base, key, template, check string) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := clientAt(base, key).Create(ctx, cove.SandboxOptions{Template: template, Timeout: 3 * time.Minute})
	if err != nil {
		return false, "create: " + err.Error()
	}
	defer sb.Kill(context.Background())
	out, code := sh(t, sb, check, time.Minute)
	return code == 0, fmt.Sprintf("%q exited %d: %.300s", check, code, out)
}

// TestTemplateNames: team B builds templates named like the template store's own
// directories and like team A's template, each on a server of its own (an attack that works
// breaks the store for everything after it): afterwards team A still creates from base and
// from its template, and still builds.
func TestTemplateNames(t *testing.T) {
	need(t)
	defer report(t, classTemplateNames)
	const victimName = "rt-names-victim"
	for _, name := range []string{"layers", ".build-x", "image-0123456789abcdef0123", "base", victimName, ".failed", ".trash-x", "uploads", "builds"} {
		t.Run(name, func(t *testing.T) {
			s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t)})
			keyB := newTeam(t, s, "rt-names-b")
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			a := clientAt(s.URL, s.Key)
			if _, err := a.BuildTemplate(ctx, victimName, cove.TemplateDefinition{FromTemplate: "base",
				Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo victim > victim.txt"}}}}, cove.TemplateBuildOptions{}); err != nil {
				t.Fatalf("team A builds its template: %v", err)
			}
			tid, bid, refused, body := startBuild(s.URL, keyB, name, map[string]any{"fromTemplate": "base",
				"steps": []map[string]any{{"type": "RUN", "args": []string{"echo attacker > attacker.txt"}}}})
			outcome := fmt.Sprintf("refused %d %.120s", refused, body)
			if refused == 0 {
				st, why := waitBuild(s.URL, keyB, tid, bid, 2*time.Minute)
				outcome = st + " " + why
			}
			t.Logf("team B builds a template named %q: %s", name, outcome)
			ok, why := createWorks(t, s.URL, s.Key, "base", "test ! -e attacker.txt")
			probe(t, classTemplateNames, fmt.Sprintf("after B's %q, A creates from base", name), ok, why)
			ok, why = createWorks(t, s.URL, s.Key, victimName, "grep -q victim victim.txt && test ! -e attacker.txt")
			probe(t, classTemplateNames, fmt.Sprintf("after B's %q, A's template is still A's", name), ok, why)
			_, err := a.BuildTemplate(ctx, "rt-names-after", cove.TemplateDefinition{FromTemplate: "base",
				Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo after > after.txt"}}}}, cove.TemplateBuildOptions{})
			probe(t, classTemplateNames, fmt.Sprintf("after B's %q, A still builds from base", name), err == nil, fmt.Sprint(err))
		})
	}
}

// newTeam makes a team on s and returns an API key of it.
func newTeam(t *testing.T, s *covetest.Server, name string) string {
	t.Helper()
	run := func(args ...string) string {
		cmd := exec.Command(env.bin, args...)
		cmd.Env = append(os.Environ(), "COVE_DATA="+s.DataDir, "COVE_API_URL="+s.URL)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	team := strings.TrimSpace(run("team", "create", name))
	return strings.Fields(run("apikey", "create", name+"-key", "--team", team))[0]
}

// TestImageCache: team B builds a template named image-<first 20 hex of an image's digest>
// before anyone pulled that image; team A's build from the image must get the image, not B's
// template. A control first builds from an image nobody poisoned.
func TestImageCache(t *testing.T) {
	need(t)
	defer report(t, classImageCache)
	registry := ocitest.Registry(t)
	// A server of its own that may pull from the test registry (on loopback, which the pull
	// guard refuses unless the operator allows it), with a second team.
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t), Args: []string{"--registry-allow", registry}})
	keyB := newTeam(t, s, "rt-image-b")
	image := func(content string) v1.Image {
		return ocitest.Image(t, runtimetest.BusyboxRootfs(t), map[string]string{
			"bin/bash":     "#!/bin/sh\nexec /bin/sh \"$@\"\n",
			"rt-image.txt": content,
		}, v1.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
	}
	auth := map[string]any{"type": "registry", "username": ocitest.User, "password": ocitest.Password}
	// Control: a build from an image nobody poisoned has the image's file.
	ctlRef := registry + "/rt/control:1"
	ocitest.Push(t, ctlRef, image("control image\n"))
	tid, bid, refused, body := startBuild(s.URL, s.Key, "rt-from-control", map[string]any{"fromImage": ctlRef, "fromImageRegistry": auth,
		"steps": []map[string]any{{"type": "RUN", "args": []string{"true"}}}})
	if refused != 0 {
		t.Fatalf("control: a build from an image in the test registry was refused (%d %.200s): the class cannot be judged", refused, body)
	}
	if st, why := waitBuild(s.URL, s.Key, tid, bid, 3*time.Minute); st != "ready" {
		t.Fatalf("control: a build from an image in the test registry ended %s: %s", st, why)
	}
	if ok, why := createWorks(t, s.URL, s.Key, tid, "grep -q 'control image' /rt-image.txt"); !ok {
		t.Fatalf("control: a sandbox from the image lacks its file: %s", why)
	}
	ref := registry + "/rt/image:1"
	img := image("from the image\n")
	ocitest.Push(t, ref, img)
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	poison := "image-" + digest.Hex[:20]
	tid, bid, refused, body = startBuild(s.URL, keyB, poison, map[string]any{"fromTemplate": "base",
		"steps": []map[string]any{{"type": "RUN", "args": []string{"echo poisoned > /tmp/rt-poisoned.txt; echo poisoned > rt-poisoned.txt"}}}})
	if refused == 0 {
		st, why := waitBuild(s.URL, keyB, tid, bid, 2*time.Minute)
		t.Logf("team B's template %s: %s %s", poison, st, why)
	} else {
		t.Logf("team B's template %s: refused %d %.200s", poison, refused, body)
	}
	tid, bid, refused, body = startBuild(s.URL, s.Key, "rt-from-image", map[string]any{"fromImage": ref,
		"fromImageRegistry": auth,
		"steps":             []map[string]any{{"type": "RUN", "args": []string{"true"}}}})
	if refused != 0 {
		probe(t, classImageCache, "A's build from the image", false, fmt.Sprintf("A's build was refused: %d %.200s", refused, body))
		return
	}
	if st, why := waitBuild(s.URL, s.Key, tid, bid, 3*time.Minute); st != "ready" {
		probe(t, classImageCache, "A's build from the image", false, fmt.Sprintf("A's build ended %s: %s", st, why))
		return
	}
	ok, why := createWorks(t, s.URL, s.Key, tid, "grep -q 'from the image' /rt-image.txt && ! ls /tmp/rt-poisoned.txt /home/user/rt-poisoned.txt /rt-poisoned.txt 2>/dev/null")
	probe(t, classImageCache, "A's sandbox from the image holds the image, not B's template", ok, why)
}

// counter is a TCP listener that counts the connections it accepts.
type counter struct {
	l net.Listener
	n atomic.Int64
}

func listenCounting(t *testing.T, addr string) *counter {
	t.Helper()
	c, err := listenCount(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.l.Close() })
	return c
}

// listenCount listens on addr and counts the connections until its listener is closed.
func listenCount(addr string) (*counter, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	c := &counter{l: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			conn.Close()
		}
	}()
	return c, nil
}

// TestPullSSRF: builds from images on the server's own API port, on loopback and on the
// host's own address must be refused with a 4xx before anything is dialled.
func TestPullSSRF(t *testing.T) {
	need(t)
	defer report(t, classPullSSRF)
	loop := listenCounting(t, "127.0.0.1:0")
	host := listenCounting(t, net.JoinHostPort(env.in.Gateway.String(), "0"))
	_, loopPort, _ := net.SplitHostPort(loop.l.Addr().String())
	_, hostPort, _ := net.SplitHostPort(host.l.Addr().String())
	targets := []struct {
		ref string
		c   *counter
	}{
		{"127.0.0.1:" + env.apiPort + "/rt/ssrf:1", nil},
		{"localhost:" + env.apiPort + "/rt/ssrf:1", nil},
		{"127.0.0.1:" + loopPort + "/rt/ssrf:1", loop},
		{"localhost:" + loopPort + "/rt/ssrf:1", loop},
		{"0.0.0.0:" + loopPort + "/rt/ssrf:1", loop},
		{"[::ffff:127.0.0.1]:" + loopPort + "/rt/ssrf:1", loop},
		{env.in.Gateway.String() + ":" + hostPort + "/rt/ssrf:1", host},
	}
	for i, tg := range targets {
		before := int64(0)
		if tg.c != nil {
			before = tg.c.n.Load()
		}
		tid, bid, refused, body := startBuild(env.server.URL, env.keyB, fmt.Sprintf("rt-ssrf-%d", i), map[string]any{"fromImage": tg.ref})
		why := fmt.Sprintf("refused %d %.200s", refused, body)
		if refused == 0 {
			st, reason := waitBuild(env.server.URL, env.keyB, tid, bid, time.Minute)
			why = fmt.Sprintf("the build started (and ended %s: %.200s)", st, reason)
		}
		dialled := tg.c != nil && tg.c.n.Load() > before
		if dialled {
			why += "; the server dialled the target"
		}
		probe(t, classPullSSRF, "fromImage "+tg.ref, refused >= 400 && refused < 500 && !dialled, why)
	}
	if strings.Contains(env.server.URL, "127.0.0.1") {
		t.Logf("targets: the API at %s, loopback and %s listeners", env.server.URL, env.in.Gateway)
	}
}
