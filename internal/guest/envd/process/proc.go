package process

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cove-dev/cove/sdk/gen/process"
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
		cause     string // killed (SendSignal) or timeout (the Start stream's deadline)
	}
	caps []*capture // per output (stdout or pty, stderr) when a Sink collects
	// oomBefore is the sandbox's OOM kill count when the process started (-1: unknown).
	oomBefore int64

	stdoutBytes atomic.Int64
	stderrBytes atomic.Int64
	done        chan struct{} // closed after endEvent is set and delivered

	// The end event goes out once both the exit status and every output's EOF are in; the
	// last of them to arrive delivers it (guarded by mu). A process that exited with output
	// still open gets drainGrace before its pipes are cut.
	pumpsLeft int
	exit      *exit
	grace     *time.Timer
	onEnd     func(exit) // after the end event was delivered: log and retire
}

// subscriber is one stream's view of a process's events.
type subscriber struct {
	ch   chan *batch
	gone <-chan struct{} // the stream's context: a sender never blocks on a departed stream
}

func newSubscriber(gone <-chan struct{}) *subscriber {
	return &subscriber{ch: make(chan *batch, 16), gone: gone}
}

// batch is events handed to streams at once. Data events point into buf, a pooled read
// buffer that goes back to its pool once every stream the batch reached has sent it; a batch
// stranded in a departed stream's queue is simply left to the garbage collector.
type batch struct {
	evs  []*pb.ProcessEvent
	buf  *[]byte
	refs atomic.Int32
}

func single(ev *pb.ProcessEvent) *batch { return &batch{evs: []*pb.ProcessEvent{ev}} }

// release drops one holder's reference.
func (b *batch) release() {
	if b.buf != nil && b.refs.Add(-1) == 0 {
		putBuf(b.buf)
	}
}

// Read buffers come in the sizes pump uses, chunkSize doubling up to readSize.
var bufPools [4]sync.Pool

func bufClass(size int) int {
	c := 0
	for s := chunkSize; s < size; s <<= 1 {
		c++
	}
	return c
}

func getBuf(size int) *[]byte {
	if b, ok := bufPools[bufClass(size)].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, size)
	return &b
}

func putBuf(b *[]byte) { bufPools[bufClass(len(*b))].Put(b) }

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
func (p *proc) broadcast(b *batch) {
	p.mu.Lock()
	var one [1]*subscriber
	subs := one[:0]
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	b.refs.Store(int32(len(subs)) + 1) // each stream's, and ours until the loop is done
	for _, s := range subs {
		select {
		case s.ch <- b:
		case <-s.gone:
			b.release()
		}
	}
	b.release()
}

// pump reads one output until EOF or until cut, sending each chunk as a data event.
func (p *proc) pump(r *os.File, wrap func([]byte) *pb.ProcessEvent_DataEvent, counter *atomic.Int64, c *capture) {
	defer p.pumpDone()
	if c != nil {
		defer c.flush()
	}
	size := chunkSize // grows to readSize while output keeps filling reads
	grown := false    // the pipe's kernel buffer, on the first full read
	for {
		bp := getBuf(size)
		buf := *bp
		n, err := r.Read(buf)
		if n > 0 {
			counter.Add(int64(n))
			if c != nil {
				c.write(buf[:n]) // copies what it keeps: buf goes back to its pool
			}
			b := &batch{evs: make([]*pb.ProcessEvent, 0, (n+chunkSize-1)/chunkSize), buf: bp}
			for off := 0; off < n; off += chunkSize {
				end := min(off+chunkSize, n)
				b.evs = append(b.evs, &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(buf[off:end:end])}})
			}
			p.broadcast(b)
			if n == size {
				if !grown && p.pty == nil {
					growPipe(r)
					grown = true
				}
				size = min(size*2, readSize)
			} else if n < chunkSize {
				size = chunkSize
			}
		} else {
			putBuf(bp)
		}
		if err != nil {
			return
		}
	}
}

// pumpDone records one output's EOF (or cut) and ends the process if it was the last thing
// the end waited for.
func (p *proc) pumpDone() {
	p.mu.Lock()
	p.pumpsLeft--
	ready := p.pumpsLeft == 0 && p.exit != nil
	p.mu.Unlock()
	if ready {
		p.finish()
	}
}

// exited records the process's exit. It never blocks: called from the reaper, it hands the
// end to a goroutine when the output already drained, else arms the drain grace timer.
func (p *proc) exited(ex exit) {
	p.mu.Lock()
	p.exit = &ex
	ready := p.pumpsLeft == 0
	if !ready {
		p.grace = time.AfterFunc(drainGrace, p.cut)
	}
	p.mu.Unlock()
	if ready {
		go p.finish()
	}
}

// cut makes the pumps' pending reads return: output kept open past the grace is dropped.
func (p *proc) cut() {
	for _, f := range p.outs {
		_ = f.SetReadDeadline(time.Now())
	}
}

// finish runs once, after the process exited and its output drained: it delivers the end event.
func (p *proc) finish() {
	if p.grace != nil {
		p.grace.Stop()
	}
	for _, f := range p.outs {
		_ = f.Close()
	}
	p.closeStdin()

	ex := *p.exit
	ex.OOMKilled = p.oomKilled(ex)
	ev := endEvent(ex)
	p.mu.Lock()
	p.endEvent = ev
	var one [1]*subscriber
	subs := one[:0]
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.subs = nil
	p.mu.Unlock()
	b := single(ev)
	for _, s := range subs {
		select {
		case s.ch <- b:
		case <-s.gone:
		}
	}
	close(p.done)
	if p.onEnd != nil {
		p.onEnd(ex)
	}
}

// endEvent is the event that reports ex.
func endEvent(ex exit) *pb.ProcessEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: ex.Code, Exited: ex.Exited, Status: ex.Text}
	if !ex.Exited {
		msg := ex.Text
		if ex.OOMKilled {
			msg = oomKillText // the status stays E2B's "signal: killed"
			if guestKills.Load() != nil {
				msg = guestOOMKillText
			}
		}
		end.Error = &msg
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
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
