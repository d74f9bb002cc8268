package process

import (
	"testing"
	"time"

	pb "github.com/cove-dev/cove/sdk/gen/process"
)

// TestKeptEndEventsExpireAndReportIt: a retired process's end event is found
// until its time is up, then it is gone, and the expired hook runs.
func TestKeptEndEventsExpireAndReportIt(t *testing.T) {
	tb := newTable()
	expired := make(chan struct{}, 4)
	tb.expired = func() { expired <- struct{}{} }

	for pid, keep := range map[int]time.Duration{101: 50 * time.Millisecond, 102: 150 * time.Millisecond} {
		p := &proc{pid: pid, tag: "t" + string(rune('a'+pid-101)), exit: &exit{Code: 3, Exited: true, Text: "exit status 3"}}
		tb.add(p)
		tb.retire(p, keep)
	}
	sel := func(pid uint32) *pb.ProcessSelector {
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	}
	for _, pid := range []uint32{101, 102} {
		p, err := tb.find(sel(pid))
		if err != nil || p.endEvent.GetEnd().GetExitCode() != 3 {
			t.Fatalf("pid %d right after its end: %v, %v", pid, p, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err1 := tb.find(sel(101))
		_, err2 := tb.find(sel(102))
		if err1 != nil && err2 != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the kept records never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-expired:
	case <-time.After(time.Second):
		t.Error("the expired hook did not run")
	}
	for _, pid := range []uint32{101, 102} {
		if _, err := tb.find(sel(pid)); err == nil {
			t.Errorf("pid %d still found after its record expired", pid)
		}
	}
}

// TestReusedPidsAndTagsNameTheNewestProcess: a live process shadows a kept record with its
// pid or tag, and of two kept records the newer one answers.
func TestReusedPidsAndTagsNameTheNewestProcess(t *testing.T) {
	tb := newTable()
	ended := func(pid int, tag string, code int32) *proc {
		return &proc{pid: pid, tag: tag, exit: &exit{Code: code, Exited: true, Text: exitTexts[code]}}
	}
	byPID := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 7}}
	byTag := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "job"}}

	old := ended(7, "job", 1)
	tb.add(old)
	tb.retire(old, time.Minute)
	live := &proc{pid: 7, tag: "job", done: make(chan struct{})}
	tb.add(live)
	for _, sel := range []*pb.ProcessSelector{byPID, byTag} {
		if p, err := tb.find(sel); err != nil || p != live {
			t.Errorf("%v with a live process: got %v, %v; want the live one", sel, p, err)
		}
	}
	live.exit = &exit{Code: 2, Exited: true, Text: exitTexts[2]}
	tb.retire(live, time.Minute)
	for _, sel := range []*pb.ProcessSelector{byPID, byTag} {
		p, err := tb.find(sel)
		if err != nil || p.endEvent.GetEnd().GetExitCode() != 2 {
			t.Errorf("%v after both ended: got %v, %v; want the newer (exit 2)", sel, p, err)
		}
	}
}

// TestKeptEndEventsAreBounded: past maxKept, the oldest kept end events go early and the
// newest stay findable.
func TestKeptEndEventsAreBounded(t *testing.T) {
	tb := newTable()
	const n = 3 * maxKept
	for pid := 1; pid <= n; pid++ {
		p := &proc{pid: pid, exit: &exit{Code: 0, Exited: true, Text: exitTexts[0]}}
		tb.add(p)
		tb.retire(p, time.Hour)
	}
	tb.mu.Lock()
	kept := len(tb.gone)
	tb.mu.Unlock()
	if kept > maxKept {
		t.Errorf("%d end events kept, want at most %d", kept, maxKept)
	}
	if _, err := tb.find(&pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: n}}); err != nil {
		t.Errorf("the newest ended process is not found: %v", err)
	}
	if _, err := tb.find(&pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 1}}); err == nil {
		t.Error("the oldest ended process is still found past the bound")
	}
}
