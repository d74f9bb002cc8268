package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/api"
	"github.com/cove-dev/cove/internal/template"
)

// E2B's upload-link endpoint answers 201 whether or not the files are there yet (present
// says which); its Python SDK takes any other status for "Failed to get file upload link".
func TestUploadLinkAlwaysAnswers201(t *testing.T) {
	dir := t.TempDir()
	ts, err := template.OpenAt(dir+"/templates", nil)
	if err != nil {
		t.Fatal(err)
	}
	builds, err := template.OpenBuilds(ts, dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{fake: newFake(), logs: &logBuffer{}}
	srv := httptest.NewServer(api.New(api.Config{Sandboxes: e.fake, Keys: fakeKeys{}, Builds: builds,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil))}))
	t.Cleanup(srv.Close)
	e.url = srv.URL

	hash := strings.Repeat("ab", 32)
	link := func() (int, map[string]any) {
		res := e.do(t, "GET", "/templates/tpl/files/"+hash, "")
		return res.status, res.json(t)
	}
	status, first := link()
	if status != http.StatusCreated || first["present"] != false || first["url"] == "" {
		t.Fatalf("before the upload: %d %v, want 201 with present false and a url", status, first)
	}
	req, err := http.NewRequest("PUT", first["url"].(string), strings.NewReader("files"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d", res.StatusCode)
	}
	status, again := link()
	if status != http.StatusCreated || again["present"] != true {
		b, _ := json.Marshal(again)
		t.Fatalf("after the upload: %d %s, want 201 with present true", status, b)
	}
}
