package proxy

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// rpcProtocol is how an RPC to envd is framed, read off its request.
type rpcProtocol int

const (
	notRPC        rpcProtocol = iota
	connectUnary              // Connect unary: the error is a JSON body and an HTTP status
	connectStream             // Connect streaming: an end-stream envelope carries the error
	grpcHTTP2                 // gRPC: trailers-only, grpc-status and grpc-message
	grpcWeb                   // gRPC-Web: the trailers in a trailer frame of the body
)

// rpcProtocolOf says which RPC protocol r speaks: a POST to /package.Service/Method with a
// Connect or gRPC content type. Anything else (/health, /files, a user's port) is notRPC.
func rpcProtocolOf(r *http.Request) rpcProtocol {
	if r.Method != http.MethodPost {
		return notRPC
	}
	svc, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !ok || method == "" || strings.Contains(method, "/") || !strings.Contains(svc, ".") {
		return notRPC
	}
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	switch {
	case strings.HasPrefix(ct, "application/grpc-web"):
		return grpcWeb
	case strings.HasPrefix(ct, "application/grpc"):
		return grpcHTTP2
	case strings.HasPrefix(ct, "application/connect+"):
		return connectStream
	case strings.HasPrefix(ct, "application/json"), strings.HasPrefix(ct, "application/proto"):
		return connectUnary
	}
	return notRPC
}

// rpcCode is the Connect code of a proxy error, chosen for what the E2B SDKs raise. A
// sandbox that is gone, paused or unknown is not_found: the SDK raises NotFoundError with
// this message (for unavailable, its process-start path throws "Sandbox is probably not
// running anymore" and drops the message). Other upstream failures are unavailable.
func rpcCode(err error, status int) (connect string, grpc int, httpStatus int) {
	switch {
	case isStateError(err), status == http.StatusNotFound:
		return "not_found", 5, http.StatusNotFound
	case status == http.StatusBadRequest:
		return "invalid_argument", 3, http.StatusBadRequest
	case status == http.StatusUnauthorized:
		return "unauthenticated", 16, http.StatusUnauthorized
	}
	return "unavailable", 14, http.StatusServiceUnavailable
}

// writeRPCError answers an RPC with err in its own protocol, so the SDK shows message
// instead of a transport error about a 502.
func writeRPCError(w http.ResponseWriter, proto rpcProtocol, err error, status int, message string) {
	code, grpcStatus, httpStatus := rpcCode(err, status)
	h := w.Header()
	switch proto {
	case connectUnary:
		b, _ := json.Marshal(connectError{Code: code, Message: message})
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(httpStatus)
		_, _ = w.Write(b)
	case connectStream:
		h.Set("Content-Type", "application/connect+json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(rpcEndFrame(proto, code, grpcStatus, message))
	case grpcHTTP2:
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", strconv.Itoa(grpcStatus))
		h.Set("Grpc-Message", grpcEscape(message))
		w.WriteHeader(http.StatusOK)
	case grpcWeb:
		h.Set("Content-Type", "application/grpc-web+proto")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(rpcEndFrame(proto, code, grpcStatus, message))
	}
}

// rpcEndFrame is the last frame of a stream that ends with err: a Connect end-stream
// envelope with the error, or a gRPC-Web trailer frame. Other protocols have none (nil).
func rpcEndFrame(proto rpcProtocol, code string, grpcStatus int, message string) []byte {
	switch proto {
	case connectStream:
		b, _ := json.Marshal(struct {
			Error connectError `json:"error"`
		}{connectError{Code: code, Message: message}})
		return envelope(0x02, b)
	case grpcWeb:
		trailers := "grpc-status: " + strconv.Itoa(grpcStatus) + "\r\ngrpc-message: " + grpcEscape(message) + "\r\n"
		return envelope(0x80, []byte(trailers))
	}
	return nil
}

// connectError is the Connect protocol's error object.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// envelope frames b with flags, as Connect streams and gRPC-Web bodies do.
func envelope(flags byte, b []byte) []byte {
	out := make([]byte, 5, 5+len(b))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// grpcEscape percent-encodes a grpc-message as the gRPC spec asks.
func grpcEscape(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), "%20", " ")
}
