package api

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// The volume content API, as the npm SDK's Volume instance methods call it (its
// VolumeApiClient, at E2B_VOLUME_API_URL): /volumecontent/{volumeID}/dir, /path and /file.
// A caller authenticates with the volume's token (Authorization: Bearer, what the SDK sends)
// or with an API key of the volume's team (X-API-Key or Bearer; then the volume may be named
// by its name too).

// volumeHandler is a content route's body, given the volume's opened files.
type volumeHandler func(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error

func (a *api) routeVolumeContent(v Volumes) {
	route := func(pattern string, h volumeHandler) {
		a.public(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := a.volumeContent(w, r, v, h); err != nil {
				a.fail(w, r, err)
			}
		})
	}
	route("GET /volumecontent/{volumeID}/dir", volumeList)
	route("POST /volumecontent/{volumeID}/dir", volumeMakeDir)
	route("GET /volumecontent/{volumeID}/path", volumeStat)
	route("PATCH /volumecontent/{volumeID}/path", volumeSetMeta)
	route("DELETE /volumecontent/{volumeID}/path", volumeRemove)
	route("GET /volumecontent/{volumeID}/file", volumeRead)
	route("PUT /volumecontent/{volumeID}/file", volumeWrite)
}

// volumeContent authenticates the caller for the path's volume and runs h on its files.
func (a *api) volumeContent(w http.ResponseWriter, r *http.Request, v Volumes, h volumeHandler) error {
	ctx := r.Context()
	id := r.PathValue("volumeID")
	token := apiKeyFrom(r)
	if token == "" {
		return fmt.Errorf("%w: missing credentials: send the volume's token as Authorization: Bearer, or an API key", errUnauthorized)
	}
	vol, err := v.VolumeByID(ctx, id)
	if err != nil || subtle.ConstantTimeCompare([]byte(token), []byte(vol.Token)) != 1 {
		// Not the volume's own token: an API key of its team, which may name it by name.
		key, team, aerr := a.authenticate(r)
		if aerr != nil {
			if err == nil {
				return fmt.Errorf("%w: neither volume %s's token nor a valid API key", errUnauthorized, id)
			}
			return aerr
		}
		ctx = authz.With(telemetry.With(ctx, telemetry.KeyTeamID, team.ID, telemetry.KeyAPIKeyID, key.ID), authz.Caller{TeamID: team.ID, KeyID: key.ID, KeyName: key.Name})
		if vol, err = v.Volume(ctx, team.ID, id); err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
	}
	httpx.NoteFrom(ctx).Add(telemetry.KeyTeamID, vol.TeamID)
	files, err := v.VolumeFiles(ctx, vol)
	if err != nil {
		return err
	}
	defer files.Close()
	return h(w, r.WithContext(ctx), files)
}

// entryJSON renders a volume entry as E2B's VolumeEntryStat.
func entryJSON(e snapshot.Entry) cove.VolumeEntry {
	out := cove.VolumeEntry{
		Name: e.Info.Name(), Path: e.Path, Type: cove.VolumeFileTypeOf(e.Info.Mode()), Size: e.Info.Size(),
		Mode: uint32(e.Info.Mode().Perm()), Mtime: e.Info.ModTime().UTC(), Target: e.Target,
	}
	if e.Path == "/" {
		out.Name = "/"
	}
	if st, ok := e.Info.Sys().(*syscall.Stat_t); ok {
		out.UID, out.GID = st.Uid, st.Gid
		out.Atime = time.Unix(st.Atim.Sec, st.Atim.Nsec).UTC()
		out.Ctime = time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC()
	}
	return out
}

// metaQuery reads the uid, gid and mode query parameters of makeDir and writeFile.
func metaQuery(r *http.Request) (snapshot.Meta, error) {
	var m snapshot.Meta
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		set  func(uint64)
		max  uint64
	}{
		{"uid", func(n uint64) { i := int(n); m.UID = &i }, 1<<32 - 2},
		{"gid", func(n uint64) { i := int(n); m.GID = &i }, 1<<32 - 2},
		{"mode", func(n uint64) { mode := unixMode(uint32(n)); m.Mode = &mode }, 0o7777},
	} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n > f.max {
			return m, fmt.Errorf("%w: %s must be a number 0..%d, not %q", errBadRequest, f.name, f.max, s)
		}
		f.set(n)
	}
	return m, nil
}

// unixMode turns permission bits with setuid, setgid and sticky into a Go file mode.
func unixMode(n uint32) fs.FileMode {
	m := fs.FileMode(n & 0o777)
	if n&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if n&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if n&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// writeQuery reads makeDir's and writeFile's query: uid, gid, mode and force.
func writeQuery(r *http.Request) (snapshot.Meta, bool, error) {
	m, err := metaQuery(r)
	if err != nil {
		return m, false, err
	}
	s := r.URL.Query().Get("force")
	if s == "" {
		return m, false, nil
	}
	force, err := strconv.ParseBool(s)
	if err != nil {
		return m, false, fmt.Errorf("%w: force must be true or false, not %q", errBadRequest, s)
	}
	return m, force, nil
}

func volumeList(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	depth := 1
	if s := r.URL.Query().Get("depth"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("%w: depth must be 1..64, not %q", errBadRequest, s)
		}
		depth = n
	}
	entries, err := files.List(r.URL.Query().Get("path"), depth)
	if err != nil {
		return err
	}
	out := make([]cove.VolumeEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, entryJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func volumeMakeDir(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	m, force, err := writeQuery(r)
	if err != nil {
		return err
	}
	e, err := files.MakeDir(r.URL.Query().Get("path"), force, m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}

func volumeStat(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	e, err := files.Stat(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}

func volumeSetMeta(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	var body cove.VolumeMetadata
	if err := decode(r, &body); err != nil {
		return err
	}
	var m snapshot.Meta
	if body.UID != nil {
		i := int(*body.UID)
		m.UID = &i
	}
	if body.GID != nil {
		i := int(*body.GID)
		m.GID = &i
	}
	if body.Mode != nil {
		if *body.Mode > 0o7777 {
			return fmt.Errorf("%w: mode must be permission bits (0..0o7777), not %#o", errBadRequest, *body.Mode)
		}
		mode := unixMode(*body.Mode)
		m.Mode = &mode
	}
	e, err := files.SetMeta(r.URL.Query().Get("path"), m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}

func volumeRemove(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	if err := files.Remove(r.URL.Query().Get("path")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func volumeRead(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	f, e, err := files.Open(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", e.Info.ModTime(), f) // Range, Content-Length, conditional GETs
	return nil
}

func volumeWrite(w http.ResponseWriter, r *http.Request, files *snapshot.Files) error {
	m, force, err := writeQuery(r)
	if err != nil {
		return err
	}
	e, err := files.Write(r.URL.Query().Get("path"), r.Body, force, m)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the upload ended early: %v", errBadRequest, err)
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}
