package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestOfficialSDKVolumes runs test/compat/volume.test.mjs: the npm SDK's Volume class and
// volumeMounts against a server whose volumes hold 32 MiB by default.
func TestOfficialSDKVolumes(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--volume-size-mb", "32"}})
	covetest.RunSDKScenarios(t, "volume.test.mjs", s.URL, s.Key, "E2B_VOLUME_API_URL="+s.URL)
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
