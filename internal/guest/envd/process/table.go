package process

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	pb "github.com/cove-dev/cove/sdk/gen/process"
)

// table indexes processes by pid and tag. Ended processes stay findable for a while so a
// late Connect still gets their end event; they are kept as small records, not as procs.
type table struct {
	mu    sync.Mutex
	byPID map[int]*proc
	tags  map[string]*proc // nil value: reserved by a Start in progress

	// Ended processes, kept until their time is up, in the order they ended (which, keep
	// being one duration, is the order they expire), with one timer for the oldest rather
	// than one per process. One slice of values and no index: a late Connect is rare, and a
	// scan from the newest end finds the newest process that had the pid or tag, while a
	// burst of thousands of ended commands costs 56 bytes each.
	gone    []gone
	expiry  *time.Timer
	expired func() // after kept records expired (may be nil)
}

// expiryBatch is the least time between two expiry runs: a burst of ended processes expires
// in a few runs, not in one timer firing each.
const expiryBatch = time.Second

// maxKept bounds the kept end events: past it, the oldest go early. A script that starts
// commands by the thousand must not grow envd by 56 bytes each for the keep duration.
const maxKept = 1024

// gone is what a retired process leaves: enough for a late Connect to rebuild its end event.
type gone struct {
	tag     string
	text    string // exit.Text
	expires int64  // Unix nanoseconds
	pid     int32
	code    int32
	exited  bool
}

func newTable() *table {
	return &table{byPID: map[int]*proc{}, tags: map[string]*proc{}}
}

// reserveTag claims tag for a starting process; false when a live process holds it.
func (t *table) reserveTag(tag string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.tags[tag]; ok && (p == nil || !p.ended()) {
		return false
	}
	t.tags[tag] = nil
	return true
}

func (t *table) releaseTag(tag string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.tags[tag]; ok && p == nil {
		delete(t.tags, tag)
	}
}

func (t *table) add(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byPID[p.pid] = p // a reused pid names the new process: find looks here first
	if p.tag != "" {
		t.tags[p.tag] = p
	}
}

// retire replaces p, which has ended and delivered its end event, by a record kept for keep:
// the request, captures, logger and pipes of an ended process are not held meanwhile.
func (t *table) retire(p *proc, keep time.Duration) {
	ex := p.exit // set before the end, never written again
	g := gone{pid: int32(p.pid), tag: p.tag, text: ex.Text, code: ex.Code, exited: ex.Exited,
		expires: time.Now().Add(keep).UnixNano()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPID[p.pid] == p {
		delete(t.byPID, p.pid)
	}
	if p.tag != "" && t.tags[p.tag] == p {
		delete(t.tags, p.tag)
	}
	if len(t.gone) == maxKept {
		// Forget the oldest quarter at once, into a fresh array, rather than one at a time.
		t.gone = append(make([]gone, 0, maxKept), t.gone[maxKept/4:]...)
	}
	t.gone = append(t.gone, g)
	if len(t.gone) == 1 {
		if t.expiry == nil {
			t.expiry = time.AfterFunc(keep, t.expire)
		} else {
			t.expiry.Reset(keep)
		}
	}
}

// expire forgets the records whose time is up and arms the timer for the next one.
func (t *table) expire() {
	t.expireLocked()
	if t.expired != nil {
		t.expired()
	}
}

func (t *table) expireLocked() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now().UnixNano()
	n := 0
	for n < len(t.gone) && t.gone[n].expires <= now {
		n++
	}
	if n == len(t.gone) {
		t.gone = nil // drop the backing array a burst grew
		return
	}
	// Keep the rest in a fresh array when most of the old one is spent.
	if rest := t.gone[n:]; n > len(rest) {
		t.gone = append([]gone(nil), rest...)
	} else {
		clear(t.gone[:n])
		t.gone = rest
	}
	t.expiry.Reset(max(time.Duration(t.gone[0].expires-now), expiryBatch))
}

// findGone returns the newest kept record that matches, if any.
func (t *table) findGone(match func(*gone) bool) *gone {
	for i := len(t.gone) - 1; i >= 0; i-- {
		if match(&t.gone[i]) {
			return &t.gone[i]
		}
	}
	return nil
}

// ghost is the proc a late Connect sees for a retired process: ended, with its end event.
func (g *gone) ghost() *proc {
	done := make(chan struct{})
	close(done)
	return &proc{pid: int(g.pid), tag: g.tag, endEvent: endEvent(exit{Code: g.code, Exited: g.exited, Text: g.text}), done: done}
}

// find returns the process a selector names, ended or not.
func (t *table) find(sel *pb.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p, ok := t.byPID[int(s.Pid)]; ok {
			return p, nil
		}
		if g := t.findGone(func(g *gone) bool { return uint32(g.pid) == s.Pid }); g != nil {
			return g.ghost(), nil
		}
		return nil, fmt.Errorf("%w: process with pid %d", fault.ErrNotFound, s.Pid)
	case *pb.ProcessSelector_Tag:
		if p := t.tags[s.Tag]; p != nil {
			return p, nil
		}
		if g := t.findGone(func(g *gone) bool { return g.tag != "" && g.tag == s.Tag }); g != nil {
			return g.ghost(), nil
		}
		return nil, fmt.Errorf("%w: process with tag %q", fault.ErrNotFound, s.Tag)
	}
	return nil, fmt.Errorf("%w: a process selector (pid or tag) is required", fault.ErrInvalid)
}

// findRunning is find for calls that act on a live process.
func (t *table) findRunning(sel *pb.ProcessSelector) (*proc, error) {
	p, err := t.find(sel)
	if err != nil {
		return nil, err
	}
	if p.ended() {
		return nil, fmt.Errorf("%w: process %d has exited", fault.ErrNotFound, p.pid)
	}
	return p, nil
}

// running lists live processes by pid.
func (t *table) running() []*proc {
	t.mu.Lock()
	out := make([]*proc, 0, len(t.byPID))
	for _, p := range t.byPID {
		out = append(out, p)
	}
	t.mu.Unlock()
	live := out[:0]
	for _, p := range out {
		if !p.ended() {
			live = append(live, p)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].pid < live[j].pid })
	return live
}
