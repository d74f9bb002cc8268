package envdapi

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// Budget is what envd collects of a sandbox's output as log lines: the host passes it to
// envd as flags (Args). A zero field leaves envd's default (5,000 lines/s, 1 MiB/s with a
// 16 MiB burst, 64 MiB per command stream).
type Budget struct {
	LinesPerSec  int   `json:"lines_per_sec,omitempty"`
	BytesPerSec  int64 `json:"bytes_per_sec,omitempty"`
	ByteBurst    int64 `json:"byte_burst,omitempty"`
	CommandBytes int64 `json:"command_bytes,omitempty"`
	// Collect false switches the collection of command output off (the host tells envd at
	// /init, not by a flag); nil leaves it on. A sandbox's own collectLogs and its template's
	// `cove template set --collect-logs` win over it.
	Collect *bool `json:"collect,omitempty"`
}

// Args are envd's flags for the budget's set fields.
func (b Budget) Args() []string {
	var args []string
	add := func(flag string, v int64) {
		if v > 0 {
			args = append(args, flag, strconv.FormatInt(v, 10))
		}
	}
	add("--collect-lines-per-sec", int64(b.LinesPerSec))
	add("--collect-bytes-per-sec", b.BytesPerSec)
	add("--collect-byte-burst", b.ByteBurst)
	add("--collect-command-bytes", b.CommandBytes)
	return args
}

// Over is b with the fields o sets replaced.
func (b Budget) Over(o Budget) Budget {
	if o.LinesPerSec > 0 {
		b.LinesPerSec = o.LinesPerSec
	}
	if o.BytesPerSec > 0 {
		b.BytesPerSec = o.BytesPerSec
	}
	if o.ByteBurst > 0 {
		b.ByteBurst = o.ByteBurst
	}
	if o.CommandBytes > 0 {
		b.CommandBytes = o.CommandBytes
	}
	if o.Collect != nil {
		b.Collect = o.Collect
	}
	return b
}

func (b Budget) check(where string) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"lines_per_sec", int64(b.LinesPerSec)}, {"bytes_per_sec", b.BytesPerSec}, {"byte_burst", b.ByteBurst}, {"command_bytes", b.CommandBytes}} {
		if f.v < 0 {
			return fmt.Errorf("%s.%s: %d is negative", where, f.name, f.v)
		}
	}
	return nil
}

// Budgets are the operator's budgets per team and per template, by id: a template's fields
// win over its team's, which win over the server's flags.
type Budgets struct {
	Teams     map[string]Budget `json:"teams,omitempty"`
	Templates map[string]Budget `json:"templates,omitempty"`
}

// For returns the budget of a sandbox of team and template, over base.
func (bs Budgets) For(base Budget, teamID, templateID string) Budget {
	return base.Over(bs.Teams[teamID]).Over(bs.Templates[templateID])
}

// ParseBudgets reads a Budgets JSON document; unknown fields and negative values are errors
// naming the field.
func ParseBudgets(r io.Reader) (Budgets, error) {
	var bs Budgets
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&bs); err != nil {
		return Budgets{}, fmt.Errorf("collection budgets: %w", err)
	}
	if dec.More() {
		return Budgets{}, fmt.Errorf("collection budgets: more than one JSON document")
	}
	for kind, m := range map[string]map[string]Budget{"teams": bs.Teams, "templates": bs.Templates} {
		for id, b := range m {
			if err := b.check(kind + "." + id); err != nil {
				return Budgets{}, fmt.Errorf("collection budgets: %w", err)
			}
		}
	}
	return bs, nil
}
