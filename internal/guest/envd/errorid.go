package envd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/requestid"
)

// withErrorRequestID makes Connect unary error bodies that connect-go writes itself (a
// request it could not decode never reaches an interceptor) carry the request id too.
func withErrorRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isRPC(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		ew := &errorBodyWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r)
		ew.finish(telemetry.RequestID(r.Context()))
	})
}

type errorBodyWriter struct {
	http.ResponseWriter
	status    int
	buffering bool
	body      bytes.Buffer
}

func (w *errorBodyWriter) WriteHeader(code int) {
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.status, w.buffering = code, true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *errorBodyWriter) Write(b []byte) (int, error) {
	if w.buffering {
		return w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *errorBodyWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.buffering {
		f.Flush()
	}
}

func (w *errorBodyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *errorBodyWriter) finish(requestID string) {
	if !w.buffering {
		return
	}
	out := w.body.Bytes()
	var e map[string]any
	if requestID != "" && json.Unmarshal(out, &e) == nil {
		if msg, _ := e["message"].(string); !strings.Contains(msg, requestID) {
			e["message"] = strings.TrimSpace(requestid.Annotate(msg, requestID))
			if b, err := json.Marshal(e); err == nil {
				out = b
			}
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(out)
}
