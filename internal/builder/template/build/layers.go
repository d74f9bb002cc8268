package build

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"golang.org/x/sys/unix"
)

// maxLayers bounds a template's layers: the overlay mount options take one page, and every
// layer adds one lower directory path to them.
const maxLayers = 40

// rootIdentity names a full-rootfs template for layer keys: a rebuilt root changes it.
func rootIdentity(t *template.Template) string {
	return "root:" + t.Name + ":" + t.Key + ":" + t.CreatedAt.UTC().Format(time.RFC3339Nano)
}

// buildContext is what a step runs with: the configuration the steps before it set.
type buildContext struct {
	Env     map[string]string
	User    string
	Workdir string
	Scope   string // whose uploads a COPY reads (see Spec.Scope)
}

// layerKey is the cache key of step over parent, in context c, with the copied files' hash.
// A forced step gets a fresh key, so it and every step above it build anew.
func layerKey(parent string, st template.Step, c buildContext) string {
	h := sha256.New()
	fmt.Fprintf(h, "cove-layer-v1\x00%s\x00%s\x00", parent, st.Kind)
	for _, a := range st.Args {
		fmt.Fprintf(h, "%d:%s\x00", len(a), a)
	}
	fmt.Fprintf(h, "files:%s\x00user:%s\x00workdir:%s\x00", st.FilesHash, c.User, c.Workdir)
	if st.Kind == template.StepCopy {
		fmt.Fprintf(h, "scope:%s\x00", c.Scope)
	}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "env:%s=%s\x00", k, c.Env[k])
	}
	if st.Force {
		fmt.Fprintf(h, "force:%s", randomSuffix()+randomSuffix())
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// stepRun is how one layer is made: it gets the merged view of the layers below plus the new
// layer's (empty) upper directory mounted at merged, and changes files there.
type stepRun func(ctx context.Context, merged string) error

// buildLayer makes the layer key on top of lowers (topmost first, the root's rootfs last)
// unless it exists. It reports whether the layer was already there.
//
// With a disk size the step writes into a disk of its own of that many bytes, as a
// disk-limited sandbox does (runtime.NewDisk): a write past it gets ENOSPC and fails the
// step, and the host's disk gives the step no more. The layer is copied off that disk when
// the step succeeds.
func (s *Builder) buildLayer(ctx context.Context, key, parent, text string, lowers []string, sd stepDisk, run stepRun) (cached bool, err error) {
	disk := sd.size
	if s.HaveLayer(ctx, key) {
		return true, nil
	}
	start := time.Now()
	if err := os.MkdirAll(s.LayersDir(), 0o700); err != nil {
		return false, err
	}
	work, err := os.MkdirTemp(s.LayersDir(), ".build-"+key+"-")
	if err != nil {
		return false, err
	}
	unlock, err := template.LockDir(work)
	if err != nil {
		os.RemoveAll(work)
		return false, err
	}
	defer unlock()
	defer func() {
		if err != nil {
			if rerr := template.RemoveTree(work); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	diff, merged := filepath.Join(work, "diff"), filepath.Join(work, "merged")
	upper := work // where the step's diff and overlay work dir are while it runs
	if disk > 0 {
		upper = filepath.Join(work, "disk")
		if err := mountStepDisk(cmp.Or(sd.images, s.LayersDir()), work, upper, disk); err != nil {
			return false, err
		}
		defer runtime.UnmountDisk(upper) // before the deferred removal of work on failure
	}
	runDiff := filepath.Join(upper, "diff")
	wdir := filepath.Join(upper, "work")
	for _, d := range []string{runDiff, wdir, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return false, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"), runDiff, wdir)
	if len(opts) >= os.Getpagesize() {
		return false, fmt.Errorf("%w: too many layers for one overlay mount", template.ErrInvalid)
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV, opts); err != nil {
		return false, fmt.Errorf("mount build overlay: %w", err)
	}
	runErr := run(ctx, merged)
	if err := unix.Unmount(merged, 0); err != nil {
		if uerr := unix.Unmount(merged, unix.MNT_DETACH); uerr != nil {
			return false, errors.Join(runErr, fmt.Errorf("unmount build overlay: %w", err))
		}
	}
	if runErr != nil {
		if disk > 0 && diskFull(upper) {
			runErr = diskFullError(runErr, disk)
		}
		return false, runErr
	}
	for _, d := range []string{wdir, merged} {
		if err := os.RemoveAll(d); err != nil {
			return false, err
		}
	}
	if disk > 0 {
		if out, err := exec.CommandContext(ctx, "cp", "-a", "--", runDiff, diff).CombinedOutput(); err != nil {
			return false, fmt.Errorf("copy layer off the step's disk: %w: %s", err, bytes.TrimSpace(out))
		}
		if err := runtime.UnmountDisk(upper); err != nil {
			return false, err
		}
		for _, p := range []string{upper, filepath.Join(work, "disk.img")} {
			if err := os.Remove(p); err != nil {
				return false, err
			}
		}
	}
	l := template.Layer{Key: key, Parent: parent, Step: text, SizeBytes: diskUsage(diff), CreatedAt: time.Now().UTC(),
		BuildTime: time.Since(start).Seconds()}
	return s.PublishLayer(ctx, work, &l)
}

// stepDisk is the disk a step writes into: size bytes (0: the store's disk, unbounded), its
// formatted image kept in images.
type stepDisk struct {
	size   int64
	images string
}

// mountStepDisk mounts at mnt a new disk of size bytes, its image in work (the pristine
// image of each size kept in imageDir).
func mountStepDisk(imageDir, work, mnt string, size int64) error {
	img := filepath.Join(work, "disk.img")
	if err := runtime.NewDisk(imageDir, img, size); err != nil {
		return fmt.Errorf("build step disk: %w", err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	if err := runtime.MountDisk(img, mnt); err != nil {
		return fmt.Errorf("build step disk: %w", err)
	}
	return nil
}

// diskFull reports whether the filesystem of dir has (about) no room left.
func diskFull(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < 1<<20 || st.Ffree == 0
}

// diskFullError says that a failed step filled its disk, in the failure's last lines.
func diskFullError(err error, disk int64) error {
	line := fmt.Sprintf("==> ENOSPC: the step filled the build's disk (%d MB): its writes past that size failed", disk>>20)
	var ee *ExitError
	if errors.As(err, &ee) {
		ee.Tail = append(ee.Tail, line)
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.TrimPrefix(line, "==> "))
}

// diskUsage is the disk space the files under dir take (allocated blocks, each inode once).
func diskUsage(dir string) int64 {
	var n int64
	seen := map[uint64]bool{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n
}

// lookupUser resolves "name", "name:group", "uid" or "uid:gid" in the rootfs's account files.
func lookupUser(rootfs, spec string) (uid, gid int, home string, err error) {
	if spec == "" || spec == "root" {
		return 0, 0, "/root", nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	uid, gid, home = -1, -1, "/"
	if n, err := strconv.Atoi(name); err == nil {
		uid, gid = n, n
	}
	if err := scanColon(filepath.Join(rootfs, "etc/passwd"), func(f []string) bool {
		if len(f) >= 6 && (f[0] == name || f[2] == name) {
			uid, _ = strconv.Atoi(f[2])
			gid, _ = strconv.Atoi(f[3])
			home = f[5]
			return true
		}
		return false
	}); err != nil && uid < 0 {
		return 0, 0, "", err
	}
	if uid < 0 {
		return 0, 0, "", fmt.Errorf("%w: user %q does not exist in the template", template.ErrInvalid, name)
	}
	if hasGroup {
		gid = -1
		if n, err := strconv.Atoi(group); err == nil {
			gid = n
		}
		_ = scanColon(filepath.Join(rootfs, "etc/group"), func(f []string) bool {
			if len(f) >= 3 && f[0] == group {
				gid, _ = strconv.Atoi(f[2])
				return true
			}
			return false
		})
		if gid < 0 {
			return 0, 0, "", fmt.Errorf("%w: group %q does not exist in the template", template.ErrInvalid, group)
		}
	}
	return uid, gid, home, nil
}

func scanColon(file string, match func([]string) bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if match(strings.Split(sc.Text(), ":")) {
			return nil
		}
	}
	return sc.Err()
}

// tailLines keeps the last n lines written through it (a failing step's error shows them).
type tailLines struct {
	n     int
	lines []string
}

func (t *tailLines) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}
