package filesystem

import (
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
)

// Entry describes path without following a final symlink: type, size, mode and permissions
// are the link's own, and SymlinkTarget is where it leads (fully resolved when possible, the
// raw link text made absolute when the target is missing). Metadata is the user.e2b.*
// attributes, of the target for a symlink (see ReadMetadata).
func Entry(path string) (*rpc.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, OSError("stat", path, err)
	}
	return entryFromInfo(path, fi), nil
}

func entryFromInfo(path string, fi fs.FileInfo) *rpc.EntryInfo {
	mode := fi.Mode()
	e := &rpc.EntryInfo{
		Name:         fi.Name(),
		Type:         fileType(mode),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(mode.Perm()),
		Permissions:  mode.String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Metadata:     ReadMetadata(path),
	}
	if path == "/" {
		e.Name = "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = owners.user(st.Uid)
		e.Group = owners.group(st.Gid)
	}
	if mode&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			if raw, rerr := os.Readlink(path); rerr == nil {
				target = raw
				if !filepath.IsAbs(raw) {
					target = filepath.Join(filepath.Dir(path), raw)
				}
			}
		}
		if target != "" {
			e.SymlinkTarget = &target
		}
	}
	return e
}

func fileType(m fs.FileMode) rpc.FileType {
	switch {
	case m&fs.ModeSymlink != 0:
		return rpc.FileType_FILE_TYPE_SYMLINK
	case m.IsDir():
		return rpc.FileType_FILE_TYPE_DIRECTORY
	case m.IsRegular():
		return rpc.FileType_FILE_TYPE_FILE
	}
	// Devices, sockets and pipes: the protocol has no name for them, and E2B reports
	// them as files too.
	return rpc.FileType_FILE_TYPE_FILE
}

// owners caches uid and gid names: os/user reads /etc/passwd and /etc/group on every call,
// and a listing asks for the same few ids again and again. Ids without a name are not
// cached, so an account added later is picked up.
var owners nameCache

type nameCache struct {
	users, groups sync.Map // uint32 -> string
}

func (c *nameCache) user(uid uint32) string {
	if v, ok := c.users.Load(uid); ok {
		return v.(string)
	}
	id := strconv.FormatUint(uint64(uid), 10)
	u, err := user.LookupId(id)
	if err != nil {
		return id
	}
	c.users.Store(uid, u.Username)
	return u.Username
}

func (c *nameCache) group(gid uint32) string {
	if v, ok := c.groups.Load(gid); ok {
		return v.(string)
	}
	id := strconv.FormatUint(uint64(gid), 10)
	g, err := user.LookupGroupId(id)
	if err != nil {
		return id
	}
	c.groups.Store(gid, g.Name)
	return g.Name
}
