// Package files is envd's /files HTTP endpoint: GET downloads a file's raw bytes, POST
// uploads one or more files (multipart or a raw octet-stream body), as E2B's SDKs expect.
//
// The one idea: bodies are streamed, never held in memory: downloads through
// http.ServeContent (so Range works; a file stat reports as empty, as /proc's, is read first),
// uploads part by part into an unnamed O_TMPFILE file on the target's mount, copied over the
// target in place once complete (see writeFile), so no other name ever shows and a cut upload
// leaves the old file. Files are opened, made and written with the file system credentials of
// the user the request names (identity.User.Act), so the kernel checks that user's
// permissions. Access is checked here, not by the server: the X-Access-Token header or a URL
// signature made from the same token.
package files

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/envdapi"
)

// Handler serves /files.
type Handler struct {
	defaults *identity.Defaults
}

// New returns the /files handler acting with the sandbox defaults d.
func New(d *identity.Defaults) http.Handler {
	return &Handler{defaults: d}
}

// Entry is one written file in the POST answer, the type the SDK decodes.
type Entry = envdapi.FileEntry

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r)
	case http.MethodPost:
		h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		fault.WriteHTTPStatus(r.Context(), w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on /files", r.Method))
	}
}

// request is what both directions read from the query: the user and the target path.
func (h *Handler) request(r *http.Request, op operation) (*identity.User, string, error) {
	q := r.URL.Query()
	if err := h.authorize(r, op); err != nil {
		return nil, "", err
	}
	u, err := h.defaults.ByName(q.Get("username"))
	if err != nil {
		return nil, "", err
	}
	p := q.Get("path")
	if p == "" {
		return u, "", nil
	}
	abs, err := u.ResolvePath(p)
	if err != nil {
		return nil, "", fmt.Errorf("path %q: %w: %v", p, fault.ErrInvalid, err)
	}
	return u, abs, nil
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, p, err := h.request(r, opRead)
	if err != nil {
		if !writeSignatureError(ctx, w, err) {
			fault.WriteHTTP(ctx, w, err)
		}
		return
	}
	if p == "" {
		fault.WriteHTTP(ctx, w, fmt.Errorf("download: %w: the path query parameter is required", fault.ErrInvalid))
		return
	}
	// Opened as the user, who must be allowed to read it. O_NONBLOCK so that a FIFO cannot
	// hang the request; it means nothing for a regular file.
	var f *os.File
	err = u.Act(func() (err error) {
		f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		return err
	})
	if err != nil {
		fault.WriteHTTP(ctx, w, filesystem.OSError("open", p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		fault.WriteHTTP(ctx, w, filesystem.OSError("stat", p, err))
		return
	}
	if fi.IsDir() {
		fault.WriteHTTP(ctx, w, fmt.Errorf("download %s: %w: it is a directory", p, fault.ErrInvalid))
		return
	}
	if !fi.Mode().IsRegular() {
		fault.WriteHTTP(ctx, w, fmt.Errorf("download %s: %w: not a regular file", p, fault.ErrInvalid))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": fi.Name()}); cd != "" {
		w.Header().Set("Content-Disposition", cd)
	}

	// A file that stat reports as empty may still have content (/proc, /sys): read it to learn.
	var content io.ReadSeeker = f
	size := fi.Size()
	if size == 0 {
		b, err := io.ReadAll(io.LimitReader(f, maxSizelessFile+1))
		if err != nil {
			fault.WriteHTTP(ctx, w, filesystem.OSError("read", p, err))
			return
		}
		if len(b) > maxSizelessFile {
			fault.WriteHTTP(ctx, w, fmt.Errorf("download %s: %w: its size is reported as 0 but it has more than %d bytes", p, fault.ErrInvalid, maxSizelessFile))
			return
		}
		content, size = bytes.NewReader(b), int64(len(b))
	}

	// Compress when asked to (the SDK's gzip option) and the whole file is wanted.
	if size > 0 && r.Header.Get("Range") == "" && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		zw := gzip.NewWriter(w)
		if _, err := politeCopy(zw, content); err != nil {
			telemetry.Logger(ctx).Warn("download failed", telemetry.KeyPath, p, telemetry.KeyError, err.Error())
			return
		}
		_ = zw.Close()
		return
	}
	http.ServeContent(&jsonErrors{ResponseWriter: w, ctx: ctx}, r, "", fi.ModTime(), content)
}

// maxSizelessFile bounds what a download reads of a file whose size is reported as 0.
const maxSizelessFile = 16 << 20

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		for _, param := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(param), "=")
			if q, err := strconv.ParseFloat(v, 64); strings.TrimSpace(k) == "q" && err == nil && q == 0 {
				return false
			}
		}
		return true
	}
	return false
}

// jsonErrors turns the plain-text errors http.ServeContent writes (416, 412...) into
// envd's JSON error body.
type jsonErrors struct {
	http.ResponseWriter
	ctx     context.Context
	failed  bool
	written bool
}

func (j *jsonErrors) WriteHeader(status int) {
	if j.written {
		return
	}
	j.written = true
	if status >= 400 {
		j.failed = true
		msg := http.StatusText(status)
		if status == http.StatusRequestedRangeNotSatisfiable {
			msg = "requested range not satisfiable"
		}
		h := j.ResponseWriter.Header()
		h.Del("Content-Length")
		h.Del("X-Content-Type-Options")
		fault.WriteHTTPStatus(j.ctx, j.ResponseWriter, status, strings.ToLower(msg))
		return
	}
	j.ResponseWriter.WriteHeader(status)
}

func (j *jsonErrors) Write(b []byte) (int, error) {
	if !j.written {
		j.WriteHeader(http.StatusOK)
	}
	if j.failed {
		return len(b), nil
	}
	return j.ResponseWriter.Write(b)
}

func (j *jsonErrors) Unwrap() http.ResponseWriter { return j.ResponseWriter }

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, p, err := h.request(r, opWrite)
	if err != nil {
		if !writeSignatureError(ctx, w, err) {
			fault.WriteHTTP(ctx, w, err)
		}
		return
	}
	md, err := metadataOf(r.Header)
	if err != nil {
		fault.WriteHTTP(ctx, w, err)
		return
	}
	body, err := decodedBody(r)
	if err != nil {
		fault.WriteHTTP(ctx, w, err)
		return
	}
	_, gunzip := body.(*gzip.Reader)
	up := &uploader{ctx: ctx, user: u, metadata: md, heavy: gunzip}
	ct := r.Header.Get("Content-Type")
	mediaType, params, _ := mime.ParseMediaType(ct)
	var written []Entry
	var size int64
	switch {
	case mediaType == "multipart/form-data":
		written, size, err = up.multipart(body, params["boundary"], p)
	case ct == "" || mediaType == "application/octet-stream":
		if p == "" {
			err = fmt.Errorf("upload: %w: the path query parameter is required for an octet-stream body", fault.ErrInvalid)
			break
		}
		var e Entry
		e, size, err = up.write(p, body)
		if err == nil {
			written = []Entry{e}
		}
	default:
		err = fmt.Errorf("upload: %w: content type %q is neither multipart/form-data nor application/octet-stream", fault.ErrInvalid, ct)
	}
	if err != nil {
		fault.WriteHTTP(ctx, w, err)
		return
	}
	telemetry.Logger(ctx).Info("files uploaded", telemetry.KeyFiles, len(written), telemetry.KeyBytes, size, telemetry.KeyUser, u.Name)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(written)
}

// decodedBody undoes Content-Encoding: gzip; other codings are refused.
func decodedBody(r *http.Request) (io.Reader, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("upload: %w: the body is not gzip: %v", fault.ErrInvalid, err)
		}
		return zr, nil
	default:
		return nil, fmt.Errorf("upload: %w: content encoding %q is not supported (use gzip)", fault.ErrInvalid, enc)
	}
}

// uploadMultipart writes every part named "file": to path when the query gives one (then
// only one file part is allowed), otherwise to the part's filename, which the E2B SDKs set
// to the target path.
func (up *uploader) multipart(body io.Reader, boundary string, path string) ([]Entry, int64, error) {
	if boundary == "" {
		return nil, 0, fmt.Errorf("upload: %w: multipart body without a boundary", fault.ErrInvalid)
	}
	mr := multipartReader(body, boundary)
	var out []Entry
	var total int64
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, total, fmt.Errorf("upload: %w: bad multipart body: %v", fault.ErrInvalid, err)
		}
		if part.FormName() != "file" {
			_ = part.Close()
			continue
		}
		target := path
		if target == "" || len(out) > 0 {
			if path != "" {
				return nil, total, fmt.Errorf("upload: %w: the path query parameter names one file, but the body has several file parts", fault.ErrInvalid)
			}
			name := rawFileName(part.Header.Get("Content-Disposition"))
			if name == "" {
				return nil, total, fmt.Errorf("upload: %w: a file part has no filename and the path query parameter is missing", fault.ErrInvalid)
			}
			if target, err = up.user.ResolvePath(name); err != nil {
				return nil, total, fmt.Errorf("upload: filename %q: %w: %v", name, fault.ErrInvalid, err)
			}
		}
		e, n, err := up.write(target, part)
		total += n
		if err != nil {
			return nil, total, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, total, fmt.Errorf("upload: %w: the multipart body has no part named \"file\"", fault.ErrInvalid)
	}
	return out, total, nil
}

// rawFileName is the filename of a Content-Disposition header as sent: multipart.Part's
// FileName keeps only the base name, but the SDKs put the whole target path there.
func rawFileName(cd string) string {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// politeChunk is how much CPU-bound copying (compressing, decompressing) goes between two
// yields of the processor.
const politeChunk = 64 << 10

// heavySlots bounds how many CPU-bound copies run at once: all but one of the processors Go
// runs on (one when there is just one). The one left over keeps polling the network and
// running commands' goroutines: with every processor compressing, the runtime polls the
// network only every 10 ms, and each hop of a command's stream waits that long.
var heavySlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))

// politeCopy is io.Copy for streams that cost CPU (gzip on either side): each chunk is
// copied holding one of heavySlots, and the processor is yielded after it. Two gzip
// downloads held a `true` round trip to 30 ms at p50 on two cores without it
// (go run ./bench/envd -only busy).
func politeCopy(dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, politeChunk)
	var n int64
	for {
		heavySlots <- struct{}{}
		nr, rerr := src.Read(buf)
		var werr error
		if nr > 0 {
			var nw int
			nw, werr = dst.Write(buf[:nr])
			n += int64(nw)
			if werr == nil && nw != nr {
				werr = io.ErrShortWrite
			}
		}
		<-heavySlots
		runtime.Gosched()
		switch {
		case werr != nil:
			return n, werr
		case rerr == io.EOF:
			return n, nil
		case rerr != nil:
			return n, rerr
		}
	}
}
