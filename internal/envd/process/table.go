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
// late Connect still gets their end event.
type table struct {
	mu    sync.Mutex
	byPID map[int]*proc
	tags  map[string]*proc // nil value: reserved by a Start in progress
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
	t.byPID[p.pid] = p
	if p.tag != "" {
		t.tags[p.tag] = p
	}
}

// retire forgets p after keep, unless its pid or tag was taken by a newer process.
func (t *table) retire(p *proc, keep time.Duration) {
	time.AfterFunc(keep, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.byPID[p.pid] == p {
			delete(t.byPID, p.pid)
		}
		if p.tag != "" && t.tags[p.tag] == p {
			delete(t.tags, p.tag)
		}
	})
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
		return nil, fmt.Errorf("%w: process with pid %d", fault.ErrNotFound, s.Pid)
	case *pb.ProcessSelector_Tag:
		if p := t.tags[s.Tag]; p != nil {
			return p, nil
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
