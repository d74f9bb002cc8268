package blob

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func tarFlags() []string { return []string{"--numeric-owner", "--xattrs", "--xattrs-include=*"} }

// PutTree stores dir's tree as one tar under key, leaving out exclude ("" for nothing). The
// tar is GNU tar's, with numeric owners and every extended attribute, so overlay whiteouts
// (character devices 0:0) and opaque directories (trusted.overlay.opaque) survive. A tar cut
// short is deleted, never left to be taken for a whole one.
func PutTree(ctx context.Context, b Store, key, dir, exclude string) error {
	return putTree(ctx, b, key, dir, exclude, false)
}

// PutSparseTree is PutTree for a tree of sparse files (a volume's ext4 image): their holes
// are stored as holes, so a 1 GiB image with 10 MiB written uploads about 10 MiB. GetTree
// unpacks it sparse again.
func PutSparseTree(ctx context.Context, b Store, key, dir, exclude string) error {
	return putTree(ctx, b, key, dir, exclude, true)
}

func putTree(ctx context.Context, b Store, key, dir, exclude string, sparse bool) error {
	args := append([]string{"-C", dir}, tarFlags()...)
	if sparse {
		args = append(args, "--sparse")
	}
	if exclude != "" {
		args = append(args, "--exclude="+exclude)
	}
	cmd := exec.CommandContext(ctx, "tar", append(args, "-cf", "-", ".")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	perr := b.Put(ctx, key, out, -1)
	if perr != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	if perr != nil {
		return perr
	}
	if werr != nil {
		_ = b.Delete(ctx, key) // a tar cut short must not be taken for a whole one
		return fmt.Errorf("tar %s: %w: %s", dir, werr, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// GetTree unpacks the tree PutTree stored under key into parent/name: beside it first
// (parent/.fetch-name-*), then renamed in, so a cut download leaves no half a tree there. A
// tree another fetch put there first is kept.
func GetTree(ctx context.Context, b Store, key, parent, name string) error {
	rc, err := b.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.MkdirTemp(parent, ".fetch-"+name+"-")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "tar", append(append([]string{"-C", tmp}, tarFlags()...), "-xpf", "-")...)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("untar %s: %w: %s", key, err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(parent, name)); err != nil {
		_ = os.RemoveAll(tmp)
		if treeExists(filepath.Join(parent, name)) {
			return nil // another fetch put it there first
		}
		return err
	}
	return nil
}

func treeExists(p string) bool { _, err := os.Lstat(p); return err == nil }
