// Package envd is the daemon inside every sandbox: Connect services process.Process and
// filesystem.Filesystem plus HTTP /files, /health, /metrics, /envs and /init, wire-compatible
// with E2B's envd.
//
// The one idea: every call carries a request id, the client's own or one minted here, and
// every line logged for the call carries it beside envd's operation_id, so the client's log
// and envd's join on one id.
//
// envd runs inside the sandbox: it must not import the host's rooms (orchestrator, runtime,
// template, store, events, collect, api, proxy, server); what it shares with the host is in
// envdapi.
package envd

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/files"
	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/guest/envd/process"
	"github.com/cove-dev/cove/internal/guest/envd/sysinfo"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/gen/filesystem/filesystemconnect"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
	"github.com/cove-dev/cove/sdk/requestid"
)

// Version is the envd protocol version reported to clients. E2B's SDKs switch features off
// below 0.6.4.
const Version = envdapi.Version

// DefaultMaxMessageBytes bounds one Connect message.
const DefaultMaxMessageBytes = 16 << 20

// HeaderAccessToken carries the sandbox's access token when one is set.
const HeaderAccessToken = "X-Access-Token"

// Config configures a Server.
type Config struct {
	Logger          *slog.Logger
	MaxMessageBytes int           // per Connect message; DefaultMaxMessageBytes when 0
	KeepEnded       time.Duration // how long an exited process's end event is kept
	Reap            bool          // reap orphans: envd is PID 1 or a subreaper
	// Sink, when set, carries output lines and command records to the host (envd's stdout
	// in a sandbox).
	Sink     *process.Sink
	Defaults *identity.Defaults
}

// Server is envd's HTTP handler and the services behind it.
type Server struct {
	cfg      Config
	defaults *identity.Defaults
	procs    *process.Service
	fs       *filesystem.Service
	metrics  sysinfo.Sampler
	opSeq    atomic.Uint64
	handler  http.Handler

	idle *idleTrimmer // hands memory back to the OS once envd has been idle a while
}

// New builds envd's services and routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = telemetry.Logger(context.Background())
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Defaults == nil {
		cfg.Defaults = &identity.Defaults{}
	}
	s := &Server{cfg: cfg, defaults: cfg.Defaults}
	s.idle = newIdleTrimmer(trimAfter, dropMappingsAfter)
	s.procs = process.New(s.defaults, process.Options{KeepEnded: cfg.KeepEnded, Reap: cfg.Reap, Sink: cfg.Sink,
		Expired: s.idle.afterWork, Logger: cfg.Logger})

	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(cfg.MaxMessageBytes),
		// Never compress responses: output chunks are at most 32 KiB, the link is local, and
		// gzip cost half of envd's CPU at high output rates. Compressed requests still work.
		connect.WithCompressMinBytes(math.MaxInt32),
		connect.WithInterceptors(append(traceInterceptors(), s.interceptor())...),
	}
	mux := http.NewServeMux()
	s.fs = filesystem.New(s.defaults)
	mux.Handle(processconnect.NewProcessHandler(s.procs, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(s.fs, opts...))
	mux.Handle("/files", files.New(s.defaults))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /envs", s.serveEnvs)
	mux.HandleFunc("POST "+envdapi.InitPath, s.serveInit)
	s.handler = s.trimWhenIdle(s.withLogger(httpx.RequestIDs(nil, httpx.Recover(traced(withErrorRequestID(s.accessLog(s.requireToken(process.HoldFlushes(mux)))))))))
	return s
}

func (s *Server) trimWhenIdle(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.idle.begin()
		defer s.idle.end()
		next.ServeHTTP(w, r)
	})
}

// Close stops envd's watchers; running processes are left alone.
func (s *Server) Close() { s.fs.Close() }

// Handler is envd's root HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // gRPC clients speak h2c
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		case <-done:
		}
	}()
	err := srv.Serve(ln)
	close(done)
	s.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) withLogger(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(telemetry.WithLogger(r.Context(), s.cfg.Logger)))
	})
}

// requireToken enforces the access token on every path but /health and /files, which checks
// the token or a signed URL itself.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.defaults.AccessToken()
		if token == "" || r.URL.Path == "/health" || r.URL.Path == "/files" {
			next.ServeHTTP(w, r)
			return
		}
		if got := r.Header.Get(HeaderAccessToken); subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			msg := "missing access token: send the sandbox's envdAccessToken in " + HeaderAccessToken
			if got != "" {
				msg = "invalid access token in " + HeaderAccessToken
			}
			if isRPC(r.URL.Path) {
				writeConnectError(w, r, connect.CodeUnauthenticated, msg)
				return
			}
			fault.WriteHTTPStatus(r.Context(), w, http.StatusUnauthorized, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isRPC reports whether path names a Connect/gRPC procedure: /package.Service/Method.
func isRPC(path string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return ok && method != "" && !strings.Contains(method, "/") && strings.Contains(service, ".")
}

// writeConnectError answers an RPC that never reached a handler, in the Connect protocol's
// unary error shape (which streaming Connect clients also read from a non-200 answer).
func writeConnectError(w http.ResponseWriter, r *http.Request, code connect.Code, msg string) {
	msg = requestid.Annotate(msg, telemetry.RequestID(r.Context()))
	status := http.StatusUnauthorized
	if code != connect.CodeUnauthenticated {
		status = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code.String(), "message": msg})
}

// accessLog logs one line per plain HTTP request (RPCs log through the interceptor).
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || isRPC(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		begun := time.Now()
		ctx := telemetry.With(r.Context(), telemetry.KeyOperationID, s.nextOp())
		rec := &httpx.Recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(ctx))
		status := rec.StatusOr(http.StatusOK)
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		} else if status >= 400 {
			level = slog.LevelWarn
		}
		telemetry.Logger(ctx).Log(ctx, level, "http request",
			append(httpx.AccessAttrs(r, status, begun), telemetry.KeyHTTPBodySize, rec.Bytes)...)
	})
}

func (s *Server) nextOp() string { return strconv.FormatUint(s.opSeq.Add(1), 10) }

// interceptor gives every RPC an operation_id on its logger, logs unary calls and the
// streams that do not log their own end, and makes every error carry the request id.
func (s *Server) interceptor() connect.Interceptor { return &rpcInterceptor{s: s} }

type rpcInterceptor struct{ s *Server }

func (i *rpcInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		begun := time.Now()
		method := strings.TrimPrefix(req.Spec().Procedure, "/")
		ctx = telemetry.With(ctx, telemetry.KeyOperationID, i.s.nextOp())
		res, err := next(ctx, req)
		err = fault.Connect(ctx, err)
		logRPC(ctx, method, begun, err)
		return res, err
	}
}

func (i *rpcInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *rpcInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		begun := time.Now()
		method := strings.TrimPrefix(conn.Spec().Procedure, "/")
		ctx = telemetry.With(ctx, telemetry.KeyOperationID, i.s.nextOp())
		err := fault.Connect(ctx, next(ctx, conn))
		if !strings.HasPrefix(method, "process.Process/") || conn.Spec().StreamType == connect.StreamTypeClient {
			logRPC(ctx, method, begun, err)
		}
		return err
	}
}

func logRPC(ctx context.Context, method string, begun time.Time, err error) {
	code, level := "ok", slog.LevelInfo
	var attrs []any
	if err != nil {
		c := fault.Code(err)
		code = c.String()
		level = slog.LevelWarn
		if c == connect.CodeInternal || c == connect.CodeUnknown || c == connect.CodeDataLoss {
			level = slog.LevelError
		}
		attrs = append(attrs, telemetry.KeyError, err.Error())
	}
	attrs = append(attrs, telemetry.KeyRPCMethod, method, telemetry.KeyConnectCode, code,
		telemetry.KeyDurationMS, float64(time.Since(begun).Microseconds())/1000)
	telemetry.Logger(ctx).Log(ctx, level, "rpc", attrs...)
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.metrics.Sample())
}

func (s *Server) serveEnvs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.defaults.Get().EnvVars)
}

func (s *Server) serveInit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req envdapi.Init
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		fault.WriteHTTPStatus(ctx, w, http.StatusBadRequest, "init: body is not valid JSON: "+err.Error())
		return
	}
	if req.DefaultUser != nil && *req.DefaultUser != "" {
		if _, err := identity.Lookup(*req.DefaultUser); err != nil {
			fault.WriteHTTP(ctx, w, fmt.Errorf("init: default user: %w", err))
			return
		}
	}
	s.defaults.Update(req.EnvVars, req.DefaultUser, req.DefaultWorkdir, req.AccessToken)
	if req.CollectOutput != nil && s.cfg.Sink != nil {
		s.cfg.Sink.SetOutput(*req.CollectOutput)
	}
	names := make([]string, 0, len(req.EnvVars))
	for k := range req.EnvVars {
		names = append(names, k)
	}
	telemetry.Logger(ctx).Info("init", telemetry.KeyEnvNames, names, telemetry.KeyAccessTokenSet, req.AccessToken != nil && *req.AccessToken != "",
		telemetry.KeyDefaultUser, deref(req.DefaultUser), telemetry.KeyDefaultWorkdir, deref(req.DefaultWorkdir))
	w.WriteHeader(http.StatusNoContent)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
