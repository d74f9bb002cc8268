package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cove-dev/cove/sdk/gen/process"
)

// leanRoundTrip times one /bin/true through envd's Start with a plain HTTP POST of one
// Connect envelope, reading the response's envelopes to the end-of-stream: the floor's
// client, speaking Connect. Against the connect-go client's figure it tells what of envd's
// overhead is the client's (connect-go sends the request through a pipe and reads the
// response through its own goroutines).
func leanRoundTrip(ctx context.Context, hc *http.Client, base string) (time.Duration, error) {
	noStdin := false
	msg, err := proto.Marshal(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}, Stdin: &noStdin})
	if err != nil {
		return 0, err
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/process.Process/Start", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/connect+proto")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var took time.Duration
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			return 0, fmt.Errorf("read envelope: %w", err)
		}
		b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return 0, err
		}
		if hdr[0]&2 != 0 { // end of stream
			if took == 0 {
				return 0, fmt.Errorf("/bin/true: no end event before %s", b)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return took, nil
		}
		var ev pb.StartResponse
		if err := proto.Unmarshal(b, &ev); err != nil {
			return 0, err
		}
		if ev.GetEvent().GetEnd() != nil {
			took = time.Since(t0)
		}
	}
}
