package files

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/envdapi"
)

// metadataHeaderPrefix starts the request headers that carry file metadata:
// "X-Metadata-<Key>: <value>" stores <value> under the lower-cased <Key>.
const metadataHeaderPrefix = envdapi.MetadataHeaderPrefix

// metadataOf collects and checks the metadata headers of an upload: keys and values are
// printable US-ASCII, a key is at most filesystem.MaxMetadataKeyLen bytes, all of it at most
// filesystem.MaxMetadataSize; for a repeated header the first value counts. Anything else is
// an invalid-argument error naming the header. No header gives an empty map, which clears
// the file's metadata.
func metadataOf(h http.Header) (map[string]string, error) {
	names := make([]string, 0, len(h))
	for name := range h {
		if len(name) >= len(metadataHeaderPrefix) && strings.EqualFold(name[:len(metadataHeaderPrefix)], metadataHeaderPrefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names) // deterministic: which header an error names does not depend on map order
	md := make(map[string]string, len(names))
	for _, name := range names {
		values := h[name]
		if len(values) == 0 {
			continue
		}
		key := strings.ToLower(name[len(metadataHeaderPrefix):])
		value := values[0]
		switch {
		case key == "":
			return nil, fmt.Errorf("upload: %w: header %s names no metadata key", fault.ErrInvalid, name)
		case !filesystem.ValidMetadataText(key):
			return nil, fmt.Errorf("upload: %w: header %q: metadata keys must be printable US-ASCII", fault.ErrInvalid, name)
		case len(key) > filesystem.MaxMetadataKeyLen:
			return nil, fmt.Errorf("upload: %w: header %s: the metadata key is %d bytes, at most %d are allowed", fault.ErrInvalid, name, len(key), filesystem.MaxMetadataKeyLen)
		case !filesystem.ValidMetadataText(value):
			return nil, fmt.Errorf("upload: %w: header %s: metadata values must be printable US-ASCII (bytes 0x20-0x7E)", fault.ErrInvalid, name)
		}
		if _, dup := md[key]; dup {
			// Two header names differing only in case (possible when a header map is
			// built by hand): keep the first in sorted order.
			continue
		}
		md[key] = value
	}
	if n := filesystem.MetadataSize(md); n > filesystem.MaxMetadataSize {
		return nil, fmt.Errorf("upload: %w: the X-Metadata-* headers add up to %d bytes (keys with their %q prefix, plus values), at most %d are allowed", fault.ErrInvalid, n, filesystem.MetadataXattrPrefix, filesystem.MaxMetadataSize)
	}
	return md, nil
}

// uploader writes the files of one upload, all with the same metadata.
type uploader struct {
	ctx      context.Context
	user     *identity.User
	metadata map[string]string
	heavy    bool // the body is being decompressed: copy it politely
	warned   bool
}

// write stores r at target with the upload's metadata and describes it. On a file system
// without user extended attributes the file is still written, as E2B's envd does, without
// its metadata: the answer then carries none, and a warning is logged.
func (up *uploader) write(target string, r io.Reader) (Entry, int64, error) {
	n, stored, err := writeFile(target, up.user, r, up.metadata, up.heavy)
	if err != nil {
		return Entry{}, n, err
	}
	e := Entry{Name: filepath.Base(target), Type: "file", Path: target}
	if stored && len(up.metadata) > 0 {
		e.Metadata = up.metadata
	} else if len(up.metadata) > 0 && !up.warned {
		up.warned = true
		telemetry.Logger(up.ctx).Warn("file metadata not stored", telemetry.KeyPath, target, telemetry.KeyError, filesystem.ErrXattrUnsupported.Error())
	}
	return e, n, nil
}
