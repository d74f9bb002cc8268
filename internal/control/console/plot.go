package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// plotPoints is how many points a plot keeps at most: samples are averaged (CPU, network
// rates) or maxed (memory, disk) into this many equal time buckets on the server, so a
// sandbox's whole life costs the page the same few kilobytes.
const plotPoints = 240

// plot is one resource series over a sandbox's life, downsampled, drawn as inline SVG.
type plot struct {
	Name   string
	Unit   unit
	Times  []time.Time // bucket midpoints
	Values []float64
	Limit  float64 // the sandbox's limit in Unit (memory, disk); 0 when none
}

type unit int

const (
	unitPct unit = iota
	unitBytes
	unitBytesPerSec
)

// format writes v in u, short.
func (u unit) format(v float64) string {
	switch u {
	case unitPct:
		return fmt.Sprintf("%.0f%%", v)
	case unitBytesPerSec:
		return bytesText(v) + "/s"
	}
	return bytesText(v)
}

func bytesText(v float64) string {
	const k = 1024
	switch {
	case v >= k*k*k:
		return fmt.Sprintf("%.1f GiB", v/(k*k*k))
	case v >= k*k:
		return fmt.Sprintf("%.1f MiB", v/(k*k))
	case v >= k:
		return fmt.Sprintf("%.1f KiB", v/k)
	}
	return fmt.Sprintf("%.0f B", v)
}

// plots downsamples a sandbox's samples (oldest first) into its CPU, memory, disk and
// network plots. Network is the receive plus transmit rate between consecutive samples;
// it is empty when every counter stayed zero (no interface reported traffic).
func plots(samples []store.MetricSample) []plot {
	cpu := plot{Name: "CPU", Unit: unitPct}
	mem := plot{Name: "Memory", Unit: unitBytes}
	disk := plot{Name: "Disk", Unit: unitBytes}
	net := plot{Name: "Network", Unit: unitBytesPerSec}
	if len(samples) == 0 {
		return []plot{cpu, mem, disk, net}
	}
	last := samples[len(samples)-1]
	mem.Limit, disk.Limit = float64(last.MemTotal), float64(last.DiskTotal)
	from, to := samples[0].Time, last.Time
	span := to.Sub(from)
	n := min(plotPoints, len(samples))
	bucket := func(t time.Time) int {
		if span <= 0 {
			return 0
		}
		return min(n-1, int(float64(t.Sub(from))/float64(span)*float64(n)))
	}
	type acc struct {
		count                int
		cpu, mem, disk       float64
		netBytes, netSeconds float64
		first, lastT         time.Time
	}
	buckets := make([]acc, n)
	traffic := false
	for i, s := range samples {
		b := &buckets[bucket(s.Time)]
		if b.count == 0 {
			b.first = s.Time
		}
		b.count++
		b.lastT = s.Time
		b.cpu += s.CPUUsedPct
		b.mem = max(b.mem, float64(s.MemUsed))
		b.disk = max(b.disk, float64(s.DiskUsed))
		if i > 0 {
			p := samples[i-1]
			sent := s.NetRxBytes + s.NetTxBytes
			before := p.NetRxBytes + p.NetTxBytes
			if sent >= before { // a counter that went back (a restore) starts over
				b.netBytes += float64(sent - before)
				b.netSeconds += s.Time.Sub(p.Time).Seconds()
			}
		}
		if s.NetRxBytes+s.NetTxBytes > 0 {
			traffic = true
		}
	}
	for _, b := range buckets {
		if b.count == 0 {
			continue
		}
		mid := b.first.Add(b.lastT.Sub(b.first) / 2)
		cpu.Times, cpu.Values = append(cpu.Times, mid), append(cpu.Values, b.cpu/float64(b.count))
		mem.Times, mem.Values = append(mem.Times, mid), append(mem.Values, b.mem)
		disk.Times, disk.Values = append(disk.Times, mid), append(disk.Values, b.disk)
		if traffic && b.netSeconds > 0 {
			net.Times, net.Values = append(net.Times, mid), append(net.Values, b.netBytes/b.netSeconds)
		}
	}
	return []plot{cpu, mem, disk, net}
}

// Peak is the largest value of the plot.
func (p plot) Peak() float64 {
	m := 0.0
	for _, v := range p.Values {
		m = max(m, v)
	}
	return m
}

// Summary says the plot in words, for screen readers and the caption.
func (p plot) Summary() string {
	if len(p.Values) == 0 {
		return p.Name + ": no data"
	}
	s := fmt.Sprintf("%s: now %s, peak %s", p.Name, p.Unit.format(p.Values[len(p.Values)-1]), p.Unit.format(p.Peak()))
	if p.Limit > 0 {
		s += " of " + p.Unit.format(p.Limit)
	}
	return s
}

// Plot geometry, in SVG user units.
const (
	plotW, plotH = 600.0, 120.0
	plotPad      = 4.0
)

// SVG draws the plot as an inline SVG line chart: a polyline over the plot's time span,
// scaled to its top (100% for CPU, the limit when set, else the peak). No script, no
// outside asset.
func (p plot) SVG() template.HTML {
	if len(p.Values) == 0 {
		return template.HTML(`<p class="nodata">no data</p>`)
	}
	top := p.Peak()
	switch {
	case p.Unit == unitPct:
		top = math.Max(100, top)
	case p.Limit > 0:
		top = math.Max(p.Limit, top)
	}
	if top <= 0 {
		top = 1
	}
	from, to := p.Times[0], p.Times[len(p.Times)-1]
	span := to.Sub(from).Seconds()
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="plot" viewBox="0 0 %g %g" preserveAspectRatio="none" role="img" aria-label="%s">`,
		plotW, plotH, template.HTMLEscapeString(p.Summary()))
	fmt.Fprintf(&b, `<title>%s</title><polyline fill="none" stroke="currentColor" stroke-width="1.5" vector-effect="non-scaling-stroke" points="`,
		template.HTMLEscapeString(p.Summary()))
	for i, v := range p.Values {
		x := plotPad
		if span > 0 {
			x += p.Times[i].Sub(from).Seconds() / span * (plotW - 2*plotPad)
		}
		y := plotH - plotPad - v/top*(plotH-2*plotPad)
		if len(p.Values) == 1 { // one point: a flat line across, so it shows
			fmt.Fprintf(&b, "%.1f,%.1f %.1f,%.1f", plotPad, y, plotW-plotPad, y)
			break
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	fmt.Fprintf(&b, `"/></svg><div class="axis"><span>%s</span><span>top %s</span><span>%s</span></div>`,
		timeTag(from), p.Unit.format(top), timeTag(to))
	return template.HTML(b.String())
}

func timeTag(t time.Time) string {
	u := t.UTC().Format(time.RFC3339)
	return `<time datetime="` + u + `" title="` + u + `">` + u + `</time>`
}

// usage is a sandbox's CPU and memory now, from its newest sample.
type usage struct {
	CPU      string
	Mem      string
	At       time.Time
	MemShare float64 // 0..1 of its limit
}

func usageOf(s store.MetricSample) *usage {
	u := &usage{CPU: unitPct.format(s.CPUUsedPct), Mem: bytesText(float64(s.MemUsed)), At: s.Time}
	if s.MemTotal > 0 {
		u.MemShare = float64(s.MemUsed) / float64(s.MemTotal)
		u.Mem += " / " + bytesText(float64(s.MemTotal))
	}
	return u
}
