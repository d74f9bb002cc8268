package process

import (
	"testing"
	"time"

	pb "github.com/cove-dev/cove/gen/process"
)

// TestKeptEndEventsExpireAndReportTheTableDrained: a retired process's end event is found
// until its time is up, then it is gone and the drained hook runs once the last one expired.
func TestKeptEndEventsExpireAndReportTheTableDrained(t *testing.T) {
	tb := newTable()
	drained := make(chan struct{}, 4)
	tb.drained = func() { drained <- struct{}{} }

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
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("the table never reported drained")
	}
	for _, pid := range []uint32{101, 102} {
		if _, err := tb.find(sel(pid)); err == nil {
			t.Errorf("pid %d still found after its record expired", pid)
		}
	}
	if len(drained) != 0 {
		t.Error("drained reported more than once for one burst")
	}
}
