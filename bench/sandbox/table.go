package main

import "fmt"

// result is one row of the table.
type result struct {
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Pass   *bool   `json:"pass,omitempty"` // nil: informational
}

func (b *bench) add(metric string, v float64, unit, target string, pass *bool) {
	b.rows = append(b.rows, result{metric, v, unit, target, pass})
}

func (b *bench) info(metric string, v float64, unit string) { b.add(metric, v, unit, "", nil) }

func (b *bench) check(metric string, v float64, unit, target string, ok bool) {
	b.add(metric, v, unit, target, &ok)
}

func (b *bench) printTable() {
	w := 0
	for _, r := range b.rows {
		w = max(w, len(r.Metric))
	}
	fmt.Printf("%-*s  %15s  %-10s  %s\n", w, "metric", "value", "target", "result")
	for _, r := range b.rows {
		verdict := "info"
		if r.Pass != nil {
			verdict = map[bool]string{true: "pass", false: "MISS"}[*r.Pass]
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		fmt.Printf("%-*s  %15s  %-10s  %s\n", w, r.Metric, fmt.Sprintf("%.3f %s", r.Value, r.Unit), target, verdict)
	}
}
