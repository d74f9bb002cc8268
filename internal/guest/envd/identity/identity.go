// Package identity decides who a call in envd acts as and with which environment: the user
// named by the call (Basic auth on RPC, ?username= on /files) or the sandbox's default, and
// the defaults that POST /init sets (env vars, user, workdir, access token).
package identity

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrUnknownUser is returned for a user name the sandbox does not have.
var ErrUnknownUser = errors.New("unknown user")

// ErrForbiddenUser is returned when envd, not running as root, is asked to act as another user.
var ErrForbiddenUser = errors.New("cannot act as another user")

// User is a sandbox account a call acts as.
type User struct {
	Name   string
	UID    int
	GID    int
	Groups []uint32
	Home   string
}

// accounts caches lookups until /etc/passwd or /etc/group change: every call names a user,
// and reading both files per call was a measurable part of a command's round trip.
var accounts struct {
	sync.Mutex
	stamp accountStamp
	users map[string]*User
}

// accountStamp tells versions of the account files apart: a write in place changes a file's
// size or modification time, a replacement (as useradd makes) its inode.
type accountStamp [2]struct {
	ino, size int64
	mtime     unix.Timespec
}

// readAccountStamp stats both files: two system calls, no allocation (an os.Stat of each and
// a formatted string cost 3.4 us a call here, twice per command).
func readAccountStamp() accountStamp { return stampOf(accountFiles) }

// accountFiles are the files os/user reads.
var accountFiles = [2]string{"/etc/passwd", "/etc/group"}

func stampOf(files [2]string) (s accountStamp) {
	for i, f := range files {
		var st unix.Stat_t
		if unix.Stat(f, &st) == nil {
			s[i].ino, s[i].size, s[i].mtime = int64(st.Ino), st.Size, st.Mtim
		}
	}
	return s
}

// Lookup returns the account named name.
func Lookup(name string) (*User, error) {
	return lookupAt(name, readAccountStamp())
}

// lookupAt is Lookup for the account files' version stamp.
func lookupAt(name string, stamp accountStamp) (*User, error) {
	if u := cachedAt(name, stamp); u == noUser {
		return nil, fmt.Errorf("%w %q", ErrUnknownUser, name)
	} else if u != nil {
		return permitted(u)
	}
	u, missing, err := lookup(name)
	accounts.Lock()
	if accounts.stamp == stamp && (err == nil || missing) {
		if missing {
			accounts.users[name] = noUser // a miss is cached too, until the files change
		} else {
			accounts.users[name] = u
		}
	}
	accounts.Unlock()
	if err != nil {
		return nil, err
	}
	return permitted(u)
}

// cachedAt returns the cached account named name (noUser for a cached miss), or nil; a
// stamp other than the cache's empties the cache.
func cachedAt(name string, stamp accountStamp) *User {
	accounts.Lock()
	defer accounts.Unlock()
	if accounts.users == nil || accounts.stamp != stamp {
		accounts.stamp, accounts.users = stamp, map[string]*User{}
	}
	return accounts.users[name]
}

// noUser marks a name the account files do not know, in the accounts cache.
var noUser = &User{}

// permitted refuses, for an envd not running as root, any account but its own.
func permitted(u *User) (*User, error) {
	if u.UID != os.Geteuid() && os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: envd runs as uid %d, not root, and %q is uid %d", ErrForbiddenUser, os.Geteuid(), u.Name, u.UID)
	}
	return u, nil
}

// lookup reads the account files; missing reports that they do not name the account (a
// failure to read them is not cached).
func lookup(name string) (_ *User, missing bool, _ error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, errors.As(err, new(user.UnknownUserError)), fmt.Errorf("%w %q", ErrUnknownUser, name)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	out := &User{Name: u.Username, UID: uid, GID: gid, Home: u.HomeDir}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				out.Groups = append(out.Groups, uint32(n))
			}
		}
	}
	if out.Home == "" {
		out.Home = "/"
	}
	return out, false, nil
}

// IsSelf reports whether u is the account envd runs as, so no credential switch is needed.
func (u *User) IsSelf() bool { return u.UID == os.Geteuid() && u.GID == os.Getegid() }

// ResolvePath turns a path a client sent into an absolute, clean one: "~" and "~/x" expand to
// the user's home, and a relative path is taken from the home directory, as E2B's envd does.
func (u *User) ResolvePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path contains a NUL byte")
	}
	switch {
	case p == "~":
		p = u.Home
	case strings.HasPrefix(p, "~/"):
		p = filepath.Join(u.Home, p[2:])
	case !filepath.IsAbs(p):
		p = filepath.Join(u.Home, p)
	}
	return filepath.Clean(p), nil
}

// Defaults are the sandbox-wide settings POST /init sets. The zero value is ready to use.
type Defaults struct {
	mu          sync.RWMutex
	envVars     map[string]string
	user        string
	workdir     string
	accessToken string
}

// Snapshot is a copy of the Defaults at one moment.
type Snapshot struct {
	EnvVars     map[string]string
	User        string
	Workdir     string
	AccessToken string
}

// Get returns a copy of the current defaults.
func (d *Defaults) Get() Snapshot {
	d.mu.RLock()
	defer d.mu.RUnlock()
	env := make(map[string]string, len(d.envVars))
	for k, v := range d.envVars {
		env[k] = v
	}
	return Snapshot{EnvVars: env, User: d.user, Workdir: d.workdir, AccessToken: d.accessToken}
}

// Update merges the given settings: env vars are added or replaced, and a non-nil string
// replaces its setting.
func (d *Defaults) Update(env map[string]string, user, workdir, accessToken *string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.envVars == nil {
		d.envVars = map[string]string{}
	}
	for k, v := range env {
		d.envVars[k] = v
	}
	if user != nil {
		d.user = *user
	}
	if workdir != nil {
		d.workdir = *workdir
	}
	if accessToken != nil {
		d.accessToken = *accessToken
	}
}

// AccessToken returns the token every call must carry, or "" when none is required.
func (d *Defaults) AccessToken() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.accessToken
}

// DefaultUserName is the account used when neither the call nor /init names one: the
// sandbox's "user" when it exists (as in E2B templates), otherwise envd's own account.
func (d *Defaults) DefaultUserName() string { return d.defaultUserAt(readAccountStamp()) }

func (d *Defaults) defaultUserAt(stamp accountStamp) string {
	d.mu.RLock()
	name := d.user
	d.mu.RUnlock()
	if name != "" {
		return name
	}
	if os.Geteuid() == 0 {
		u := cachedAt("user", stamp)
		if u == nil { // not looked up since the files changed
			u, _ = lookupAt("user", stamp)
		}
		if u != nil && u != noUser {
			return "user"
		}
	}
	if u, err := user.Current(); err == nil { // cached by os/user
		return u.Username
	}
	return "root"
}

// FromBasicAuth returns the user named in an "Authorization: Basic base64(user:)" header, or
// the default user when the header is absent.
func (d *Defaults) FromBasicAuth(h http.Header) (*User, error) {
	name := ""
	if auth := h.Get("Authorization"); auth != "" {
		const prefix = "Basic "
		if !strings.HasPrefix(auth, prefix) {
			return nil, fmt.Errorf("%w: Authorization must be Basic base64(user:)", ErrUnknownUser)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(auth[len(prefix):]))
		if err != nil {
			return nil, fmt.Errorf("%w: Authorization is not valid base64", ErrUnknownUser)
		}
		name, _, _ = strings.Cut(string(raw), ":")
	}
	return d.ByName(name)
}

// ByName returns the user named name, or the default user when name is "".
func (d *Defaults) ByName(name string) (*User, error) {
	stamp := readAccountStamp() // once for both lookups
	if name == "" {
		name = d.defaultUserAt(stamp)
	}
	return lookupAt(name, stamp)
}
