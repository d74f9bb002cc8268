package template

import "testing"

func TestStartSnapshotKeyChangesWithWhatTheSnapshotStartsFrom(t *testing.T) {
	base := func() *Template {
		return &Template{Root: "base", Layers: []string{"l1", "l2"}, StartCmd: "serve", ReadyCmd: "check",
			Env: map[string]string{"A": "1", "B": "2"}, User: "user", Workdir: "/home/user", CPUCount: 1, MemoryMB: 256}
	}
	want := startSnapshotKey(base())
	if again := startSnapshotKey(base()); again != want {
		t.Fatalf("the same template keys differently: %s, %s", want, again)
	}
	for _, c := range []struct {
		name   string
		change func(*Template)
	}{
		{"another root", func(t *Template) { t.Root = "other" }},
		{"another layer", func(t *Template) { t.Layers[1] = "l3" }},
		{"one more layer", func(t *Template) { t.Layers = append(t.Layers, "l3") }},
		{"another start command", func(t *Template) { t.StartCmd = "serve --fast" }},
		{"another ready check", func(t *Template) { t.ReadyCmd = "check2" }},
		{"another env value", func(t *Template) { t.Env["A"] = "3" }},
		{"one more env var", func(t *Template) { t.Env["C"] = "" }},
		{"another user", func(t *Template) { t.User = "root" }},
		{"another workdir", func(t *Template) { t.Workdir = "/" }},
		{"another cpu count", func(t *Template) { t.CPUCount = 2 }},
		{"another memory size", func(t *Template) { t.MemoryMB = 512 }},
		{"the start command moved into the ready check", func(t *Template) { t.StartCmd, t.ReadyCmd = "", "serve\ncheck" }},
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
