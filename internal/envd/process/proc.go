package process

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cove-dev/cove/gen/process"
)

// chunkSize bounds one data event, as E2B's envd does.
const chunkSize = 32 << 10

// readSize is how much one read of a process's output takes at most: a burst is read at once
// and handed to streams as one batch of chunkSize events.
const readSize = 256 << 10

// drainGrace is how long output may keep arriving after the process exited before the pipes
// are cut: a background grandchild that keeps stdout open must not hold the stream forever.
const drainGrace = 100 * time.Millisecond

// proc is one process envd started. It outlives every stream attached to it.
type proc struct {
	pid       int
	tag       string
	config    *pb.ProcessConfig
	user      string
	requestID string // of the Start call
	started   time.Time

	pty   *os.File // master side, nil unless started with a PTY
	outs  []*os.File
	stdin *os.File // write end of the stdin pipe; nil for a PTY or /dev/null stdin

	stdinMu     sync.Mutex
	stdinClosed bool

	mu       sync.Mutex
	subs     map[*subscriber]struct{}
	endEvent *pb.ProcessEvent // set once the process ended and its output drained
	signal   struct {         // the last SendSignal, to attribute a kill
		requestID string
		name      string
	}

	stdoutBytes atomic.Int64
	stderrBytes atomic.Int64
	done        chan struct{} // closed after endEvent is set and delivered
}

// subscriber is one stream's view of a process's events.
type subscriber struct {
	ch   chan []*pb.ProcessEvent
	gone <-chan struct{} // the stream's context: a sender never blocks on a departed stream
}

func newSubscriber(gone <-chan struct{}) *subscriber {
	return &subscriber{ch: make(chan []*pb.ProcessEvent, 16), gone: gone}
}

// subscribe attaches s and reports the end event when the process already ended, in which
// case s is not attached.
func (p *proc) subscribe(s *subscriber) (ended *pb.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.endEvent != nil {
		return p.endEvent
	}
	p.subs[s] = struct{}{}
	return nil
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

func (p *proc) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endEvent != nil
}

// broadcast hands a batch of events to every attached stream, waiting for slow ones
// (backpressure reaches the process through its pipe) but never for one whose client has gone.
func (p *proc) broadcast(evs []*pb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- evs:
		case <-s.gone:
		}
	}
}

// pump reads one output until EOF or until cut, sending each chunk as a data event.
func (p *proc) pump(r *os.File, wrap func([]byte) *pb.ProcessEvent_DataEvent, counter *atomic.Int64, wg *sync.WaitGroup) {
	defer wg.Done()
	size := chunkSize // grows to readSize while output keeps filling reads
	for {
		buf := make([]byte, size)
		n, err := r.Read(buf)
		if n > 0 {
			counter.Add(int64(n))
			evs := make([]*pb.ProcessEvent, 0, (n+chunkSize-1)/chunkSize)
			for off := 0; off < n; off += chunkSize {
				end := min(off+chunkSize, n)
				evs = append(evs, &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(buf[off:end:end])}})
			}
			p.broadcast(evs)
			if n == size {
				size = min(size*2, readSize)
			} else if n < chunkSize {
				size = chunkSize
			}
		}
		if err != nil {
			return
		}
	}
}

// finish waits for the output to drain after the process exited, then delivers the end event.
func (p *proc) finish(ex exit, pumps *sync.WaitGroup) {
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		for _, f := range p.outs {
			_ = f.SetReadDeadline(time.Now())
		}
		<-drained
	}
	for _, f := range p.outs {
		_ = f.Close()
	}
	p.closeStdin()

	end := &pb.ProcessEvent_EndEvent{ExitCode: ex.Code, Exited: ex.Exited, Status: ex.Text}
	if !ex.Exited {
		msg := ex.Text
		end.Error = &msg
	}
	ev := &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
	p.mu.Lock()
	p.endEvent = ev
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.subs = map[*subscriber]struct{}{}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- []*pb.ProcessEvent{ev}:
		case <-s.gone:
		}
	}
	close(p.done)
}

var errStdinClosed = errors.New("stdin is closed")

// writeStdin writes to the process's stdin pipe.
func (p *proc) writeStdin(b []byte) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil || p.stdinClosed {
		return errStdinClosed
	}
	_, err := p.stdin.Write(b)
	return err
}

func (p *proc) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil && !p.stdinClosed {
		p.stdinClosed = true
		_ = p.stdin.Close()
	}
}
