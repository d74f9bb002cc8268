package process

import (
	"fmt"
	"sort"
	"sync"
	"time"

	pb "github.com/cove-dev/cove/gen/process"
	"github.com/cove-dev/cove/internal/envd/fault"
)

// table indexes processes by pid and tag. Ended processes stay findable for a while so a
// late Connect still gets their end event; they are kept as small records, not as procs.
type table struct {
	mu    sync.Mutex
	byPID map[int]*proc
	tags  map[string]*proc // nil value: reserved by a Start in progress

	// Ended processes, kept until their time is up: by pid and tag, and in the order they
	// ended (which, keep being one duration, is the order they expire), with one timer for
	// the oldest rather than one per process.
	goneByPID map[int]*gone
	goneTags  map[string]*gone
	goneQueue []*gone
	expiry    *time.Timer
	drained   func() // after the last kept record expired (may be nil)
}

// gone is what a retired process leaves: enough for a late Connect to rebuild its end event.
type gone struct {
	pid     int
	tag     string
	text    string // exit.Text
	code    int32
	exited  bool
	expires time.Time
}

func newTable() *table {
	return &table{byPID: map[int]*proc{}, tags: map[string]*proc{}, goneByPID: map[int]*gone{}, goneTags: map[string]*gone{}}
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
	t.byPID[p.pid] = p
	delete(t.goneByPID, p.pid) // a reused pid names the new process
	if p.tag != "" {
		t.tags[p.tag] = p
		delete(t.goneTags, p.tag)
	}
}

// retire replaces p, which has ended and delivered its end event, by a record kept for keep:
// the request, captures, logger and pipes of an ended process are not held meanwhile.
func (t *table) retire(p *proc, keep time.Duration) {
	ex := p.exit // set before the end, never written again
	g := &gone{pid: p.pid, tag: p.tag, text: ex.Text, code: ex.Code, exited: ex.Exited, expires: time.Now().Add(keep)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPID[p.pid] == p {
		delete(t.byPID, p.pid)
		t.goneByPID[p.pid] = g
	}
	if p.tag != "" && t.tags[p.tag] == p {
		delete(t.tags, p.tag)
		t.goneTags[p.tag] = g
	}
	t.goneQueue = append(t.goneQueue, g)
	if len(t.goneQueue) == 1 {
		if t.expiry == nil {
			t.expiry = time.AfterFunc(keep, t.expire)
		} else {
			t.expiry.Reset(keep)
		}
	}
}

// expire forgets the records whose time is up and arms the timer for the next one.
func (t *table) expire() {
	if t.expireLocked() && t.drained != nil {
		t.drained()
	}
}

// expireLocked does expire's work and reports whether no kept record is left.
func (t *table) expireLocked() (empty bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	n := 0
	for _, g := range t.goneQueue {
		if g.expires.After(now) {
			break
		}
		if t.goneByPID[g.pid] == g {
			delete(t.goneByPID, g.pid)
		}
		if g.tag != "" && t.goneTags[g.tag] == g {
			delete(t.goneTags, g.tag)
		}
		n++
	}
	clear(t.goneQueue[:n])
	t.goneQueue = t.goneQueue[n:]
	if len(t.goneQueue) == 0 {
		// Drop what a burst grew: the queue's backing array, and the maps' buckets (a Go map
		// never shrinks).
		t.goneQueue = nil
		t.goneByPID, t.goneTags = map[int]*gone{}, map[string]*gone{}
		return true
	}
	t.expiry.Reset(t.goneQueue[0].expires.Sub(now))
	return false
}

// ghost is the proc a late Connect sees for a retired process: ended, with its end event.
func (g *gone) ghost() *proc {
	done := make(chan struct{})
	close(done)
	return &proc{pid: g.pid, tag: g.tag, endEvent: endEvent(exit{Code: g.code, Exited: g.exited, Text: g.text}), done: done}
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
		if g, ok := t.goneByPID[int(s.Pid)]; ok {
			return g.ghost(), nil
		}
		return nil, fmt.Errorf("%w: process with pid %d", fault.ErrNotFound, s.Pid)
	case *pb.ProcessSelector_Tag:
		if p := t.tags[s.Tag]; p != nil {
			return p, nil
		}
		if g, ok := t.goneTags[s.Tag]; ok {
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
