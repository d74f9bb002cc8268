package build

import (
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
)

func TestStartSnapshotKeyChangesWithWhatTheSnapshotStartsFrom(t *testing.T) {
	base := func() *template.Template {
		return &template.Template{Root: "base", Layers: []string{"l1", "l2"}, StartCmd: "serve", ReadyCmd: "check",
			Env: map[string]string{"A": "1", "B": "2"}, User: "user", Workdir: "/home/user", CPUCount: 1, MemoryMB: 256}
	}
	want := startSnapshotKey(base())
	if again := startSnapshotKey(base()); again != want {
		t.Fatalf("the same template keys differently: %s, %s", want, again)
	}
	for _, c := range []struct {
		name   string
		change func(*template.Template)
	}{
		{"another root", func(t *template.Template) { t.Root = "other" }},
		{"another layer", func(t *template.Template) { t.Layers[1] = "l3" }},
		{"one more layer", func(t *template.Template) { t.Layers = append(t.Layers, "l3") }},
		{"another start command", func(t *template.Template) { t.StartCmd = "serve --fast" }},
		{"another ready check", func(t *template.Template) { t.ReadyCmd = "check2" }},
		{"another env value", func(t *template.Template) { t.Env["A"] = "3" }},
		{"one more env var", func(t *template.Template) { t.Env["C"] = "" }},
		{"another user", func(t *template.Template) { t.User = "root" }},
		{"another workdir", func(t *template.Template) { t.Workdir = "/" }},
		{"another cpu count", func(t *template.Template) { t.CPUCount = 2 }},
		{"another memory size", func(t *template.Template) { t.MemoryMB = 512 }},
		{"the start command moved into the ready check", func(t *template.Template) { t.StartCmd, t.ReadyCmd = "", "serve\ncheck" }},
	} {
		t.Run(c.name+" changes the key", func(t *testing.T) {
			tt := base()
			c.change(tt)
			if startSnapshotKey(tt) == want {
				t.Fatalf("the key stayed %s", want)
			}
		})
	}
	t.Run("the order env vars were set in does not change the key", func(t *testing.T) {
		tt := base()
		tt.Env = map[string]string{"B": "2", "A": "1"}
		if startSnapshotKey(tt) != want {
			t.Fatal("the key changed")
		}
	})
}
