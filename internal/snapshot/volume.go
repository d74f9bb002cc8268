package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"
)

// Volume is a named, persistent directory of a team that outlives sandboxes: mounted into
// one at create (volumeMounts), kept when the sandbox is gone.
type Volume struct {
	ID        string    `json:"volumeID"`
	Name      string    `json:"name"`
	TeamID    string    `json:"teamId"`
	Token     string    `json:"token"` // for E2B's volume content API
	CreatedAt time.Time `json:"createdAt"`
}

// Errors of the volume store.
var (
	ErrVolumeNotFound = errors.New("volume not found")
	ErrVolumeExists   = errors.New("a volume with that name exists")
	ErrVolumeName     = errors.New("bad volume name")
)

// Volumes is the volumes under one directory: <dir>/<id>/volume.json and <dir>/<id>/data.
type Volumes struct {
	dir string
	mu  sync.Mutex // serialises create and delete, so names stay unique per team
}

// OpenVolumes returns the volume store in dir, making it.
func OpenVolumes(dir string) (*Volumes, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	return &Volumes{dir: dir}, nil
}

var (
	volumeID   = regexp.MustCompile(`^vol-[0-9a-f]{16}$`)
	volumeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// DataDir is the directory sandboxes see of volume id.
func (v *Volumes) DataDir(id string) string { return filepath.Join(v.dir, id, "data") }

// Create makes a team's volume named name.
func (v *Volumes) Create(teamID, name string) (*Volume, error) {
	if !volumeName.MatchString(name) {
		return nil, fmt.Errorf("%w: %q must be 1-63 of [A-Za-z0-9._-] starting with a letter or digit", ErrVolumeName, name)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, err := v.byName(teamID, name); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrVolumeExists, name)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	vol := &Volume{ID: "vol-" + hex.EncodeToString(b[:8]), Name: name, TeamID: teamID, Token: hex.EncodeToString(b[8:]), CreatedAt: time.Now().UTC()}
	if err := os.MkdirAll(v.DataDir(vol.ID), 0o777); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	// Sandboxes run commands as uid 1000 by default: the volume is theirs to write.
	if err := os.Chmod(v.DataDir(vol.ID), 0o777|os.ModeSticky); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	js, _ := json.MarshalIndent(vol, "", "  ")
	if err := os.WriteFile(filepath.Join(v.dir, vol.ID, "volume.json"), js, 0o600); err != nil {
		_ = os.RemoveAll(filepath.Join(v.dir, vol.ID))
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	return vol, nil
}

// Get returns a team's volume by id or name.
func (v *Volumes) Get(teamID, idOrName string) (*Volume, error) {
	if volumeID.MatchString(idOrName) {
		vol, err := v.read(idOrName)
		if err != nil || vol.TeamID != teamID {
			return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, idOrName)
		}
		return vol, nil
	}
	return v.byName(teamID, idOrName)
}

func (v *Volumes) read(id string) (*Volume, error) {
	b, err := os.ReadFile(filepath.Join(v.dir, id, "volume.json"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, id)
	}
	var vol Volume
	if err := json.Unmarshal(b, &vol); err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, err)
	}
	return &vol, nil
}

func (v *Volumes) byName(teamID, name string) (*Volume, error) {
	all, err := v.List(teamID)
	if err != nil {
		return nil, err
	}
	for _, vol := range all {
		if vol.Name == name {
			return vol, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, name)
}

// List returns a team's volumes, oldest first.
func (v *Volumes) List(teamID string) ([]*Volume, error) {
	entries, err := os.ReadDir(v.dir)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var out []*Volume
	for _, e := range entries {
		if !volumeID.MatchString(e.Name()) {
			continue
		}
		if vol, err := v.read(e.Name()); err == nil && vol.TeamID == teamID {
			out = append(out, vol)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Delete removes a team's volume and its files.
func (v *Volumes) Delete(teamID, id string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	vol, err := v.Get(teamID, id)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(v.dir, vol.ID, "volume.json")); err != nil {
		return fmt.Errorf("delete volume %s: %w", vol.Name, err)
	}
	return os.RemoveAll(filepath.Join(v.dir, vol.ID))
}
