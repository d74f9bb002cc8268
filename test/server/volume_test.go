package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	cove "github.com/cove-dev/cove/sdk"
)

// TestOfficialSDKVolumes runs test/compat/volume.test.mjs: the npm SDK's Volume class and
// volumeMounts against a server whose volumes hold 32 MiB by default, on each runtime.
func TestOfficialSDKVolumes(t *testing.T) {
	covetest.EachRuntime(t, func(t *testing.T, _ runtime.Engine) {
		s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--volume-size-mb", "32"}})
		covetest.RunSDKScenarios(t, "volume.test.mjs", s.URL, s.Key, "E2B_VOLUME_API_URL="+s.URL)
	})
}

// TestVolumeContentAuth: the content API answers the volume's own token and its team's API
// keys, and nobody else: another volume's token and another team's key are refused.
func TestVolumeContentAuth(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--volume-size-mb", "8"}})
	a := client{t: t, url: s.URL, key: s.Key}
	mk := func(name string) map[string]any {
		code, out, _ := a.do(http.MethodPost, "/volumes", map[string]any{"name": name})
		if code != http.StatusCreated {
			t.Fatalf("create volume %s: %d %v", name, code, out)
		}
		id := out["volumeID"].(string)
		t.Cleanup(func() { a.do(http.MethodDelete, "/volumes/"+id, nil) })
		return out
	}
	one, two := mk("auth-one"), mk("auth-two")
	team := strings.TrimSpace(cli(t, s, "team", "create", "volume-other"))
	otherKey := strings.Fields(cli(t, s, "apikey", "create", "other", "--team", team))[0]
	get := func(volume string, hdr ...string) int {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/volumecontent/"+volume+"/dir?path=/", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	id := one["volumeID"].(string)
	for _, tt := range []struct {
		name   string
		volume string
		hdr    []string
		want   int
	}{
		{"its own token as a bearer is let in", id, []string{"Authorization", "Bearer " + one["token"].(string)}, http.StatusOK},
		{"its team's API key is let in", id, []string{"X-API-Key", s.Key}, http.StatusOK},
		{"its team's API key may name it by name", "auth-one", []string{"X-API-Key", s.Key}, http.StatusOK},
		{"another volume's token is refused", id, []string{"Authorization", "Bearer " + two["token"].(string)}, http.StatusUnauthorized},
		{"no credentials are refused", id, nil, http.StatusUnauthorized},
		{"another team's key does not find it", id, []string{"X-API-Key", otherKey}, http.StatusNotFound},
		{"an unknown volume is not found", "vol-0000000000000000", []string{"X-API-Key", s.Key}, http.StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := get(tt.volume, tt.hdr...); got != tt.want {
				t.Errorf("GET /volumecontent/%s/dir: %d, want %d", tt.volume, got, tt.want)
			}
		})
	}
	t.Run("the volume's size and use are listed", func(t *testing.T) {
		code, out, _ := a.do(http.MethodGet, "/volumes/"+id, nil)
		if code != http.StatusOK || out["sizeBytes"] != float64(8<<20) || out["token"] == nil {
			t.Errorf("get volume: %d %v", code, out)
		}
		if code, out, _ := a.do(http.MethodPost, "/volumes", map[string]any{"name": "auth-big", "sizeMB": -1}); code != http.StatusBadRequest || !strings.Contains(out["message"].(string), "sizeMB") {
			t.Errorf("a negative size: %d %v", code, out)
		}
	})
}

// TestVolumeMountsListed: GET /v2/sandboxes and the legacy GET /sandboxes give each sandbox's
// volumeMounts, as E2B's ListedSandbox does and as GET /sandboxes/{id} does.
func TestVolumeMountsListed(t *testing.T) {
	covetest.Skip(t)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--network=false", "--volume-size-mb", "8"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	vol, err := c.CreateVolumeWith(ctx, "listed-vol", cove.VolumeOptions{SizeMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	want := cove.VolumeMount{Name: vol.Name, Path: "/mnt/listed", ReadOnly: true}
	with, err := c.Create(ctx, cove.SandboxOptions{Timeout: 3 * time.Minute, VolumeMounts: []cove.VolumeMount{want}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { with.Kill(context.Background()) })
	without, err := c.Create(ctx, cove.SandboxOptions{Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { without.Kill(context.Background()) })
	t.Run("the v2 listing gives each sandbox its own mounts", func(t *testing.T) {
		seen := 0
		for info, err := range c.List(ctx, cove.ListOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			switch info.SandboxID {
			case with.ID:
				seen++
				if len(info.VolumeMounts) != 1 || info.VolumeMounts[0] != want {
					t.Errorf("listed mounts of the sandbox with a volume: %+v, want [%+v]", info.VolumeMounts, want)
				}
			case without.ID:
				seen++
				if len(info.VolumeMounts) != 0 {
					t.Errorf("listed mounts of the sandbox without a volume: %+v", info.VolumeMounts)
				}
			}
		}
		if seen != 2 {
			t.Errorf("saw %d of the 2 sandboxes in the listing", seen)
		}
	})
	t.Run("the legacy listing gives them too", func(t *testing.T) {
		a := client{t: t, url: s.URL, key: s.Key}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/sandboxes", nil)
		req.Header.Set("X-API-Key", a.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var list []cove.SandboxInfo
		if err := json.NewDecoder(res.Body).Decode(&list); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET /sandboxes: %d %v", res.StatusCode, err)
		}
		found := false
		for _, info := range list {
			if info.SandboxID == with.ID {
				found = len(info.VolumeMounts) == 1 && info.VolumeMounts[0] == want
			}
		}
		if !found {
			t.Errorf("GET /sandboxes did not list %s with mount %+v: %+v", with.ID, want, list)
		}
	})
}
