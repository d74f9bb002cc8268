package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

const chromium = "/usr/bin/chromium"

// TestConsoleInABrowser drives the console in headless Chromium: sign in, a sandbox created
// through the API appears without reload, its page shows the command, the trace shows the
// end cause, and a kill from the console (confirmed) records reason request. Screenshots of
// each page, light and dark, go to $COVE_TEST_ARTIFACTS (or the test's temp dir).
func TestConsoleInABrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("chromium not installed at " + chromium + " (Debian package chromium; scripts/deps.sh installs it)")
	}
	// Its own template store, so a template built through the API shows on the build page.
	s := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))
	a := client{t: t, url: s.URL, key: s.Key}

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 120*time.Second)
	t.Cleanup(cancelTimeout)
	// The kill button asks for confirmation: accept it, as a user would.
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})

	dir := os.Getenv("COVE_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			for _, scheme := range []string{"light", "dark"} {
				var png []byte
				if err := chromedp.Run(ctx,
					emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}),
					chromedp.FullScreenshot(&png, 100)); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "console-"+name+"-"+scheme+".png"), png, 0o644); err != nil {
					return err
				}
			}
			return nil
		})
	}

	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	run("sign in", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(s.URL+"/dashboard/"),
		chromedp.WaitVisible(`#key`, chromedp.ByID), chromedp.SendKeys(`#key`, s.Key, chromedp.ByID),
		chromedp.Submit(`#key`, chromedp.ByID), chromedp.WaitVisible(`#sandboxes`, chromedp.ByID),
		chromedp.WaitVisible(`//small[@id="list-state" and text()="live"]`, chromedp.BySearch), shot("login-list"))

	id := a.create(map[string]any{"metadata": map[string]string{"taskId": "browser-1"}})
	run("see the new sandbox without reload", chromedp.WaitVisible(`tr[data-id="`+id+`"]`, chromedp.ByQuery))
	// Its first resource sample reaches the list through the same live updates.
	run("see its CPU and memory now", chromedp.WaitVisible(`tr[data-id="`+id+`"] td.cpu[title]`, chromedp.ByQuery), shot("list"))

	run("open the sandbox", chromedp.Click(`tr[data-id="`+id+`"] a`, chromedp.ByQuery), chromedp.WaitVisible(`#commands`, chromedp.ByID),
		chromedp.WaitVisible(`//small[@id="tail-state" and text()="live"]`, chromedp.BySearch))
	runCmd(t, s, id)
	// The command's output reaches the open page through the live tail, without reload.
	run("see the command's log line arrive", chromedp.WaitVisible(`//table[@id="logs"]//td[text()="browser-hello"]`, chromedp.BySearch))
	var text string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var plotted bool
		run("reload the sandbox page", chromedp.Reload(), chromedp.WaitVisible(`#logs`, chromedp.ByID),
			chromedp.Evaluate(`document.querySelector("#plots .plot-CPU svg.plot") !== null`, &plotted))
		if plotted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no CPU plot on the sandbox page after 30 s")
		}
	}
	run("sandbox page", shot("sandbox"))
	run("search the log", chromedp.SendKeys(`input[name="q"]`, "browser-hello", chromedp.ByQuery), chromedp.Submit(`input[name="q"]`, chromedp.ByQuery),
		// The value attribute is the server's: it is there once the search's page has loaded.
		chromedp.WaitVisible(`input[name="q"][value="browser-hello"]`, chromedp.ByQuery), chromedp.Text(`#logs`, &text, chromedp.ByID))
	if !strings.Contains(text, "browser-hello") || strings.Contains(text, "browser-other") {
		t.Errorf("log search: %q", text)
	}
	run("search the logs of every sandbox", chromedp.Click(`a[href="/dashboard/logs"]`, chromedp.ByQuery), chromedp.WaitVisible(`#logsearch`, chromedp.ByID),
		chromedp.SendKeys(`#logsearch input[name="q"]`, "browser-hello", chromedp.ByQuery), chromedp.Submit(`#logsearch input[name="q"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#logsearch input[name="q"][value="browser-hello"]`, chromedp.ByQuery), chromedp.Text(`#logresults`, &text, chromedp.ByID), shot("logs"))
	if !strings.Contains(text, "browser-hello") || !strings.Contains(text, id) || strings.Contains(text, "browser-other") {
		t.Errorf("logs search: %q", text)
	}
	run("back to the sandbox", chromedp.Navigate(s.URL+"/dashboard/sandboxes/"+id+"?q=browser-hello"), chromedp.WaitVisible(`#logs`, chromedp.ByID))
	run("open the trace", chromedp.Click(`a[href="/dashboard/trace?id=req-browser-1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#waterfall`, chromedp.ByID), chromedp.Text(`#waterfall`, &text, chromedp.ByID), shot("trace"))
	if !strings.Contains(text, "exited 5") {
		t.Errorf("trace lacks the end cause: %q", text)
	}
	run("kill from the console", chromedp.Navigate(s.URL+"/dashboard/sandboxes/"+id), chromedp.Click(`button.danger`, chromedp.ByQuery),
		chromedp.WaitVisible(`#kill-reason`, chromedp.ByID), chromedp.Text(`#kill-reason`, &text, chromedp.ByID), shot("killed"))
	if text != "request" {
		t.Errorf("kill reason %q, want request", text)
	}
	killedWith(t, a, id, "request")
	st, err := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key}).BuildTemplate(ctx, "browser-tpl", cove.TemplateDefinition{FromTemplate: "base",
		Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo browser-build-output"}}}}, cove.TemplateBuildOptions{})
	if err != nil {
		t.Fatalf("build a template: %v", err)
	}
	v := newViewer(t, s.URL)
	v.signIn(s.Key)
	waitBuildPage(t, v, st.BuildID, "browser-build-output")
	run("the templates page", chromedp.Click(`a[href="/dashboard/templates"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-template="base"]`, chromedp.ByQuery), shot("templates"))
	run("open the build", chromedp.Click(`tr[data-build="`+st.BuildID+`"] a`, chromedp.ByQuery), chromedp.WaitVisible(`#steps`, chromedp.ByID),
		chromedp.WaitVisible(`//table[@id="logs"]//td[text()="browser-build-output"]`, chromedp.BySearch), shot("build"))
	run("the events page", chromedp.Click(`a[href="/dashboard/events"]`, chromedp.ByQuery), chromedp.WaitVisible(`#events`, chromedp.ByID),
		chromedp.Text(`#events`, &text, chromedp.ByID), shot("events"))
	if !strings.Contains(text, "sandbox.lifecycle.killed") {
		t.Errorf("events page lacks the kill: %q", text)
	}
	run("create an API key", chromedp.Click(`a[href="/dashboard/keys"]`, chromedp.ByQuery), chromedp.WaitVisible(`#keys`, chromedp.ByID),
		chromedp.SendKeys(`input[name="name"]`, "browser-key", chromedp.ByQuery), chromedp.Submit(`input[name="name"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#new-key`, chromedp.ByID), chromedp.Text(`#new-key`, &text, chromedp.ByID), shot("keys"))
	if !strings.HasPrefix(text, "e2b_") {
		t.Errorf("new key shown as %q", text)
	}
	run("the health page", chromedp.Click(`a[href="/dashboard/health"]`, chromedp.ByQuery), chromedp.WaitVisible(`#m-cove_sandboxes`, chromedp.ByID), shot("health"))
	var theme, bg string
	run("pick the dark theme", chromedp.Click(`#theme`, chromedp.ByID), chromedp.Click(`#theme`, chromedp.ByID), chromedp.Reload(),
		chromedp.WaitVisible(`#theme`, chromedp.ByID), chromedp.Text(`#theme`, &theme, chromedp.ByID),
		chromedp.Evaluate(`getComputedStyle(document.body).backgroundColor`, &bg))
	if theme != "Theme: dark" || bg != "rgb(20, 20, 24)" {
		t.Errorf("after picking dark and a reload: %q, background %s", theme, bg)
	}
	run("back to the system's theme", chromedp.Click(`#theme`, chromedp.ByID))
	var focused string
	run("press / to jump to the log search", chromedp.Click(`a[href="/dashboard/logs"]`, chromedp.ByQuery), chromedp.WaitVisible(`#logsearch`, chromedp.ByID),
		chromedp.KeyEvent("/"), chromedp.Evaluate(`document.activeElement.name`, &focused))
	if focused != "q" {
		t.Errorf("after /, focus is on %q, want the text search", focused)
	}
	// A phone's width: nothing wider than the screen but the tables, which scroll inside the page.
	for _, page := range []struct{ name, path, ready string }{
		{"phone-list", "/dashboard/?state=killed", `#sandboxes`},
		{"phone-sandbox", "/dashboard/sandboxes/" + id, `#plots`},
	} {
		var overflow bool
		run(page.name, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(s.URL+page.path),
			chromedp.WaitVisible(page.ready, chromedp.ByQuery), shot(page.name),
			chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow))
		if overflow {
			t.Errorf("%s: the page is wider than a phone's screen", page.name)
		}
	}
	t.Logf("screenshots in %s", dir)
}

func runCmd(t *testing.T, s *covetest.Server, id string) {
	t.Helper()
	run(t, s, id, "echo browser-hello; echo browser-other; exit 5", "req-browser-1")
}
