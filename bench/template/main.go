// Command template benchmarks template builds and prints figures measured in one run:
//
//	go run ./bench/template            # needs root, runc and a built base template
//	go run ./bench/template -creates 50
//
// It works in a data dir of its own whose base template is the shared test base (symlinks to
// $COVE_TEST_TEMPLATES/<base key>/base, the root and layers it stands on, or -base DIR), never
// written to. It measures:
//
//  1. the build of a 3-step template on base (two RUN steps and a COPY of 1 MiB), cold;
//  2. the same build again with nothing changed (every layer from the cache), and the base
//     rebuilt from its definition (templates/base) with nothing changed;
//  3. the disk the template's own layers take against the base's rootfs;
//  4. sandbox create (runc, overlay root, /bin/true to exit) from the custom template against
//     from base, interleaved so that the machine's noise falls on both alike.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/templates"
)

func main() {
	base := flag.String("base", "", "base template directory (default: the shared test base)")
	creates := flag.Int("creates", 30, "timed creates per template")
	flag.Parse()
	if err := run(*base, *creates); err != nil {
		fmt.Fprintln(os.Stderr, "bench/template:", err)
		os.Exit(1)
	}
}

func run(base string, creates int) error {
	ctx := context.Background()
	if base == "" {
		root := os.Getenv("COVE_TEST_TEMPLATES")
		if root == "" {
			root = "/var/lib/cove-test-templates"
		}
		base = filepath.Join(root, templates.BaseKey(), "base")
	}
	if _, err := os.Stat(filepath.Join(base, "meta.json")); err != nil {
		return fmt.Errorf("no base template at %s (build it with `cove template build base`): %w", base, err)
	}
	data, err := os.MkdirTemp("", "bench-template-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	rt, err := runtime.NewRunc(ctx, runtime.Config{DataDir: filepath.Join(data, "sandboxes"),
		RuncRoot: filepath.Join(data, "runc"), NetnsDir: filepath.Join(data, "netns")})
	if err != nil {
		return err
	}
	if err := template.Link(filepath.Join(data, "templates"), filepath.Dir(base), filepath.Base(base)); err != nil {
		return err
	}
	db, err := sqlite.Open(ctx, filepath.Join(data, "cove.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	ts, err := template.Open(ctx, data, db)
	if err != nil {
		return err
	}
	store := build.New(ts, rt)
	uploads := filepath.Join(data, "uploads")
	ctxDir := filepath.Join(data, "context")
	os.MkdirAll(uploads, 0o755)
	os.MkdirAll(ctxDir, 0o755)
	blob := make([]byte, 1<<20)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(ctxDir, "blob.bin"), blob, 0o644); err != nil {
		return err
	}
	var tar bytes.Buffer
	hash, err := build.ArchiveContext(ctxDir, "blob.bin", "/opt/app/", &tar)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(uploads, hash+".tar"), tar.Bytes(), 0o644); err != nil {
		return err
	}
	spec := build.Spec{Name: "bench", From: "base", Replace: true, Files: build.DirSource(uploads), Steps: []template.Step{
		{Kind: template.StepRun, Args: []string{"python3 -c 'import json; print(json.dumps({\"ok\": 1}))' > /etc/bench.json", "root"}},
		{Kind: template.StepCopy, Args: []string{"blob.bin", "/opt/app/"}, FilesHash: hash},
		{Kind: template.StepRun, Args: []string{"useradd -m bench && echo done > /home/bench/done", "root"}},
	}}
	t0 := time.Now()
	var tpl *template.Template
	if _, err := store.Build(ctx, spec, io.Discard); err != nil {
		return err
	}
	cold := time.Since(t0)
	t0 = time.Now()
	if tpl, err = store.Build(ctx, spec, io.Discard); err != nil {
		return err
	}
	cached := time.Since(t0)
	for _, r := range tpl.Built {
		if !r.Cached {
			return fmt.Errorf("the rebuild ran step %q again", r.Step)
		}
	}
	// The base rebuilt from its definition with nothing changed: what `make run` and the test
	// store pay once the base exists (its root and layers are the shared base's, linked).
	baseSpec, err := templates.BaseSpec(store, "base", "")
	if err != nil {
		return err
	}
	baseSpec.Replace = true
	t0 = time.Now()
	rebuilt, err := store.Build(ctx, baseSpec, io.Discard)
	if err != nil {
		return err
	}
	baseCached := time.Since(t0)
	for _, r := range rebuilt.Built {
		if !r.Cached && r.Layer != "" {
			return fmt.Errorf("the base's rebuild ran step %q again (is the shared base from this definition?)", r.Step)
		}
	}
	use, err := store.Usage()
	if err != nil {
		return err
	}
	baseTpl, err := store.Get("base")
	if err != nil {
		return err
	}
	baseDisk := duBytes(baseTpl.Rootfs)

	createOn := func(layers []string) (time.Duration, error) {
		id := fmt.Sprintf("bench-%x", time.Now().UnixNano())
		t0 := time.Now()
		sb, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: baseTpl.Rootfs, Layers: layers, Args: []string{"/bin/true"}, Start: true})
		if err != nil {
			return 0, err
		}
		go io.Copy(io.Discard, sb.Stdout)
		go io.Copy(io.Discard, sb.Stderr)
		_, err = rt.Wait(ctx, id)
		d := time.Since(t0)
		return d, errors.Join(err, rt.Destroy(ctx, id))
	}
	var fromBase, fromCustom []time.Duration
	for i := range measure.Warm(creates) + creates {
		b, err := createOn(baseTpl.LayerDirs)
		if err != nil {
			return err
		}
		c, err := createOn(tpl.LayerDirs)
		if err != nil {
			return err
		}
		if i >= measure.Warm(creates) {
			fromBase, fromCustom = append(fromBase, b), append(fromCustom, c)
		}
	}
	own := use["bench"].Own
	pb, pc := measure.Pct(fromBase, 50), measure.Pct(fromCustom, 50)
	fmt.Printf("%-44s %10s\n", "metric", "value")
	fmt.Printf("%-44s %8.0f ms\n", "build, 3 steps on base (cold)", measure.Ms(cold))
	fmt.Printf("%-44s %8.0f ms   target < 1000 ms\n", "rebuild, nothing changed (all cached)", measure.Ms(cached))
	fmt.Printf("%-44s %8.0f ms   target < 1000 ms\n", "base from its definition, nothing changed", measure.Ms(baseCached))
	fmt.Printf("%-44s %8.2f MiB\n", "template's own layers on disk", float64(own)/(1<<20))
	fmt.Printf("%-44s %8.1f MiB\n", "base rootfs on disk", float64(baseDisk)/(1<<20))
	fmt.Printf("%-44s %8.2f %%   target < 5 %%\n", "template / base disk", 100*float64(own)/float64(baseDisk))
	fmt.Printf("%-44s %8.1f ms\n", "create p50 from base (runc, /bin/true)", measure.Ms(pb))
	fmt.Printf("%-44s %8.1f ms\n", "create p50 from the 3-step template", measure.Ms(pc))
	fmt.Printf("%-44s %8.2f     target <= 1.10\n", "create custom / base", float64(pc)/float64(pb))
	return nil
}

// duBytes is the disk the files under dir take (allocated blocks).
func duBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}
