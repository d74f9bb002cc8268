package sqlite

import (
	"context"
	"math"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func sample(teamID, id string, at time.Time, cpu float64) store.MetricSample {
	return store.MetricSample{SandboxID: id, TeamID: teamID, Time: at, CPUCount: 2, CPUUsedPct: cpu,
		MemUsed: 100 << 20, MemTotal: 512 << 20, MemCache: 7 << 20, DiskUsed: 20 << 20, DiskTotal: 1 << 30,
		NetRxBytes: 1500, NetTxBytes: 1400, NetRxPackets: 12, NetTxPackets: 11}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	var in []store.MetricSample
	for i := range 5 {
		in = append(in, sample("team-a", "sb1", base.Add(time.Duration(i)*5*time.Second), float64(i)*10.5))
	}
	in = append(in, sample("team-a", "sb2", base, 1), sample("team-a", "sb2", base.Add(time.Second), 2),
		sample("team-b", "sb3", base.Add(time.Hour), 3))
	if err := db.InsertSamples(ctx, in); err != nil {
		t.Fatal(err)
	}

	t.Run("a sample round-trips with every field", func(t *testing.T) {
		got, err := db.QuerySamples(ctx, "sb1", time.Time{}, time.Time{})
		if err != nil || len(got) != 5 {
			t.Fatalf("QuerySamples = %d, %v; want 5", len(got), err)
		}
		if !reflect.DeepEqual(got[3], in[3]) {
			t.Errorf("got %+v\nwant %+v", got[3], in[3])
		}
	})

	t.Run("a query keeps the samples within its inclusive bounds, oldest first", func(t *testing.T) {
		got, err := db.QuerySamples(ctx, "sb1", base.Add(5*time.Second), base.Add(15*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var pcts []float64
		for _, s := range got {
			pcts = append(pcts, s.CPUUsedPct)
		}
		if want := []float64{10.5, 21, 31.5}; !reflect.DeepEqual(pcts, want) {
			t.Errorf("cpu of samples = %v, want %v", pcts, want)
		}
	})

	t.Run("an unknown sandbox has no samples, as an empty list", func(t *testing.T) {
		got, err := db.QuerySamples(ctx, "nope", time.Time{}, time.Time{})
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("QuerySamples = %#v, %v", got, err)
		}
	})

	t.Run("latest samples are the newest of each asked sandbox of the team only", func(t *testing.T) {
		got, err := db.LatestSamples(ctx, "team-a", []string{"sb1", "sb2", "sb3", "nope"})
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(got, func(i, j int) bool { return got[i].SandboxID < got[j].SandboxID })
		if len(got) != 2 || !reflect.DeepEqual(got[0], in[4]) || !reflect.DeepEqual(got[1], in[6]) {
			t.Errorf("LatestSamples = %+v", got)
		}
		if got, _ := db.LatestSamples(ctx, "team-a", nil); len(got) != 0 {
			t.Errorf("no ids: %+v", got)
		}
	})

	t.Run("a sample at a stored instant replaces it", func(t *testing.T) {
		again := sample("team-a", "sb2", base, 99)
		if err := db.InsertSamples(ctx, []store.MetricSample{again}); err != nil {
			t.Fatal(err)
		}
		got, _ := db.QuerySamples(ctx, "sb2", base, base)
		if len(got) != 1 || got[0].CPUUsedPct != 99 {
			t.Errorf("after replace: %+v", got)
		}
	})

	t.Run("an unlimited memory limit is kept at the largest stored value", func(t *testing.T) {
		s := sample("team-a", "sb4", base, 0)
		s.MemTotal = math.MaxUint64
		if err := db.InsertSamples(ctx, []store.MetricSample{s}); err != nil {
			t.Fatal(err)
		}
		got, _ := db.QuerySamples(ctx, "sb4", time.Time{}, time.Time{})
		if len(got) != 1 || got[0].MemTotal != math.MaxInt64 {
			t.Errorf("got %+v", got)
		}
	})

	t.Run("pruning deletes samples older than the cut", func(t *testing.T) {
		if err := db.PruneSamples(ctx, base.Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.QuerySamples(ctx, "sb1", time.Time{}, time.Time{}); len(got) != 3 {
			t.Errorf("sb1 has %d samples after pruning, want 3", len(got))
		}
		if got, _ := db.QuerySamples(ctx, "sb3", time.Time{}, time.Time{}); len(got) != 1 {
			t.Errorf("sb3 has %d samples after pruning, want 1", len(got))
		}
	})
}

func BenchmarkInsertSamples(b *testing.B) {
	ctx := context.Background()
	db := newDB(b)
	batch := make([]store.MetricSample, 100)
	at := base
	for b.Loop() {
		at = at.Add(time.Second)
		for i := range batch {
			batch[i] = sample("team-a", "sb"+string(rune('a'+i%26))+string(rune('a'+i/26)), at, 1)
		}
		if err := db.InsertSamples(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDownsampleSamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	var in []store.MetricSample
	for i := range 1000 { // every second; CPU alternates 0 and 100, memory and counters rise
		s := sample("team", "sb", base.Add(time.Duration(i)*time.Second), float64(i%2)*100)
		s.MemUsed, s.NetRxBytes = uint64(i), uint64(i)*10
		in = append(in, s)
	}
	if err := db.InsertSamples(ctx, in); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		points int
		want   int
	}{
		{"a thousand samples cut to ten spans give ten", 10, 10},
		{"more points than samples give every sample", 5000, 1000},
		{"one point gives one", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.DownsampleSamples(ctx, "sb", tc.points)
			if err != nil || len(got) != tc.want {
				t.Fatalf("got %d samples, %v; want %d", len(got), err, tc.want)
			}
			last := got[len(got)-1]
			if !last.Time.Equal(in[999].Time) || last.MemUsed != 999 || last.NetRxBytes != 9990 || last.TeamID != "team" {
				t.Errorf("last span: %+v, want the newest sample's time, memory and counter", last)
			}
			if tc.want < 1000 && math.Abs(got[0].CPUUsedPct-50) > 1 {
				t.Errorf("first span's CPU %v, want the average 50", got[0].CPUUsedPct)
			}
		})
	}
	t.Run("a sandbox without samples gives none", func(t *testing.T) {
		if got, err := db.DownsampleSamples(ctx, "nope", 10); err != nil || len(got) != 0 {
			t.Errorf("got %v, %v", got, err)
		}
	})
	t.Run("zero points is refused", func(t *testing.T) {
		if _, err := db.DownsampleSamples(ctx, "sb", 0); err == nil {
			t.Error("no error")
		}
	})
}
