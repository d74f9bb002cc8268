package dockerfile_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/dockerfile"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

func TestParse(t *testing.T) {
	const df = `# a comment
FROM base AS build
ARG VERSION=1.2
ENV APP_HOME=/srv/app MODE="prod mode"
ENV LEGACY value with spaces
WORKDIR $APP_HOME
COPY --chown=user:user --chmod=755 run.sh lib/ ./
ADD data.txt /data/
RUN echo building $VERSION \
    && touch /built
USER user
RUN ["python3", "-c", "print('it''s')"]
ENTRYPOINT ["/srv/app/run.sh"]
CMD --port 8000
`
	d, err := dockerfile.Parse(strings.NewReader(df), map[string]string{"VERSION": "2.0"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range d.Steps {
		got = append(got, s.Kind.String()+" "+strings.Join(s.Args, "|"))
	}
	want := []string{
		"ENV APP_HOME|/srv/app|MODE|prod mode",
		"ENV LEGACY|value with spaces",
		"WORKDIR /srv/app",
		"COPY run.sh|/srv/app/|user:user|0755",
		"COPY lib|/srv/app/|user:user|0755",
		"COPY data.txt|/data/|root|",
		"RUN export VERSION=2.0 && echo building $VERSION  && touch /built|root",
		"USER user",
		`RUN export VERSION=2.0 && python3 -c 'print('\''it'\'''\''s'\'')'|user`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d.From != "base" || d.StartCmd != "/srv/app/run.sh --port 8000" || len(d.Copies) != 3 {
		t.Fatalf("from %q, start %q, copies %d", d.From, d.StartCmd, len(d.Copies))
	}
}

func TestParseBootstrap(t *testing.T) {
	d, err := dockerfile.Parse(strings.NewReader("ARG SUITE=bookworm\nBOOTSTRAP ${SUITE} python3 \\\n  git\nRUN useradd user\nUSER user\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.From != "" || d.Bootstrap == nil || d.Bootstrap.Suite != "bookworm" || strings.Join(d.Bootstrap.Include, ",") != "python3,git" {
		t.Fatalf("from %q, bootstrap %+v", d.From, d.Bootstrap)
	}
	if len(d.Steps) != 2 || d.Steps[0].Args[0] != "useradd user" || d.Steps[0].Args[1] != "root" {
		t.Fatalf("steps = %+v, want the RUN as root, then USER", d.Steps)
	}
}

func TestParseRefusesWhatCoveCannotBuild(t *testing.T) {
	for _, tc := range []struct{ name, df, want string }{
		{"an unsupported instruction names its line", "FROM base\nRUN true\nEXPOSE 80\n", "line 3 (EXPOSE)"},
		{"a second FROM is a multi-stage build", "FROM base\nFROM other\n", "line 2 (FROM): multi-stage"},
		{"an instruction before FROM", "RUN true\nFROM base\n", "line 1 (RUN): comes before FROM"},
		{"a remote ADD", "FROM base\nADD https://example.invalid/x /x\n", "remote sources"},
		{"a source outside the context", "FROM base\nCOPY ../secret /x\n", "outside the build context"},
		{"COPY --from", "FROM base\nCOPY --from=build /a /b\n", "--from is not supported"},
		{"no FROM at all", "# nothing\n", "no FROM"},
		{"a dangling continuation", "FROM base\nRUN true \\\n", "continuation"},
		{"a bad exec form", "FROM base\nCMD [\"a\", 1]\n", "JSON array"},
		{"BOOTSTRAP after FROM", "FROM base\nBOOTSTRAP bookworm\n", "line 2 (BOOTSTRAP): one FROM or BOOTSTRAP"},
		{"FROM after BOOTSTRAP", "BOOTSTRAP bookworm\nFROM base\n", "line 2 (FROM)"},
		{"BOOTSTRAP without a suite", "BOOTSTRAP\n", "want BOOTSTRAP suite"},
		{"BOOTSTRAP with a flag for a package", "BOOTSTRAP bookworm --foreign\n", "not a Debian package name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dockerfile.Parse(strings.NewReader(tc.df), nil)
			if !errors.Is(err, dockerfile.ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDockerfileBuildsATemplate(t *testing.T) {
	rt := runtimetest.Runc(t)
	ctx := context.Background()
	data := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(data, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ts, err := template.Open(ctx, data, db)
	if err != nil {
		t.Fatal(err)
	}
	store := build.New(ts, rt)
	if _, err := store.Import(ctx, "busybox", runtimetest.BusyboxRootfs(t), nil); err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	os.WriteFile(filepath.Join(ctxDir, "hello.sh"), []byte("#!/bin/sh\necho hello \"$WHO\"\n"), 0o644)
	d, err := dockerfile.Parse(strings.NewReader("FROM busybox\nENV WHO=docker\nWORKDIR /app\nARG SUFFIX=!\nCOPY --chmod=755 hello.sh .\nRUN ./hello.sh > out.txt && echo \"$SUFFIX\" >> out.txt\nCMD [\"/app/hello.sh\"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	uploads := t.TempDir()
	if err := d.Pack(ctxDir, uploads); err != nil {
		t.Fatal(err)
	}
	tpl, err := store.Build(ctx, build.Spec{Name: "fromdocker", From: d.From, Steps: d.Steps, StartCmd: d.StartCmd, Files: build.DirSource(uploads)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.StartCmd != "/app/hello.sh" || tpl.Workdir != "/app" || tpl.Env["WHO"] != "docker" {
		t.Fatalf("template = %+v", tpl)
	}
	id := "df-" + filepath.Base(t.TempDir())
	sb, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: tpl.Rootfs, Layers: tpl.LayerDirs, Args: []string{"/bin/cat", "/app/out.txt"}, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Destroy(ctx, id) })
	go io.Copy(io.Discard, sb.Stderr)
	var out bytes.Buffer
	out.ReadFrom(sb.Stdout)
	if out.String() != "hello docker\n!\n" {
		t.Fatalf("out.txt = %q", out.String())
	}
}
