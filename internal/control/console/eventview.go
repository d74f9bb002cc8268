package console

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// An event's payload is shown from its type (the one registry of event types and their
// payloads, cove.EventDataFor): each field labelled in words and its value in its unit
// ("execution time 3.1s", "memory 512 MB", "snapshot 64.0 MiB"), never Go's %v of a map.
// A killed event's post-mortem is a table of its processes and figures (postmortemView).

// eventFields returns the payload's fields, in the payload type's order, zero values left
// out. A payload that does not decode into its type's shape (an event written by an older
// server with another shape) falls back to its top-level JSON fields as text.
func eventFields(typ string, raw []byte) []metaPair {
	v, err := cove.EventDataFor(typ)
	if err != nil || json.Unmarshal(raw, v) != nil {
		return rawFields(raw)
	}
	var out []metaPair
	appendFields(&out, "", reflect.ValueOf(v).Elem())
	return out
}

// rawFields is a JSON object's top-level fields as text, sorted by key, without the post-mortem.
func rawFields(raw []byte) []metaPair {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m) // an event's data is a JSON object; anything else shows nothing
	delete(m, "postmortem")
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = strings.Trim(string(v), `"`)
	}
	return pairs(out)
}

var timeType = reflect.TypeFor[time.Time]()

// appendFields walks a payload struct: embedded structs (Caller) are flattened, nested ones
// (execution) prefix their fields' labels, the post-mortem is left to its own table.
func appendFields(out *[]metaPair, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || name == "postmortem" {
			continue
		}
		if f.Anonymous && fv.Kind() == reflect.Struct {
			appendFields(out, prefix, fv)
			continue
		}
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				continue
			}
			fv = fv.Elem()
		}
		label := labelOf(name)
		if prefix != "" && !strings.HasPrefix(label, prefix) {
			label = prefix + " " + label
		}
		if fv.Kind() == reflect.Struct && fv.Type() != timeType {
			appendFields(out, label, fv)
			continue
		}
		if fv.IsZero() {
			continue
		}
		*out = append(*out, metaPair{Key: label, Value: valueText(name, fv)})
	}
}

// labelOf is a JSON field name in words: "api_key_name" → "api key name", "memory_mb" → "memory".
func labelOf(name string) string {
	for _, unit := range []string{"_ms", "_mb", "_bytes"} {
		name = strings.TrimSuffix(name, unit)
	}
	return strings.ReplaceAll(name, "_", " ")
}

// valueText formats a field's value in the unit its JSON name says.
func valueText(name string, v reflect.Value) string {
	switch {
	case v.Type() == timeType:
		return v.Interface().(time.Time).UTC().Format(time.RFC3339)
	case v.Kind() == reflect.Bool:
		if v.Bool() {
			return "yes"
		}
		return "no"
	case strings.HasSuffix(name, "_ms") || name == "execution_time":
		return (time.Duration(v.Convert(reflect.TypeFor[int64]()).Int()) * time.Millisecond).String()
	case strings.HasSuffix(name, "_mb"):
		return fmt.Sprintf("%d MB", v.Convert(reflect.TypeFor[int64]()).Int())
	case strings.HasSuffix(name, "_bytes"):
		return bytesText(v.Convert(reflect.TypeFor[float64]()).Float())
	case name == "timeout":
		return (time.Duration(v.Convert(reflect.TypeFor[float64]()).Float() * float64(time.Second))).String()
	case v.Kind() == reflect.Float32 || v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// postmortemView is a killed event's post-mortem as the sandbox page's table shows it.
type postmortemView struct {
	*cove.Postmortem
	Resources []metaPair
}

// postmortemOf returns the event's post-mortem, nil when it has none.
func postmortemOf(raw []byte) *postmortemView {
	var d struct {
		Postmortem *cove.Postmortem `json:"postmortem"`
	}
	if json.Unmarshal(raw, &d) != nil || d.Postmortem == nil {
		return nil
	}
	pm := &postmortemView{Postmortem: d.Postmortem}
	if r := d.Postmortem.Resources; r != nil {
		pm.Resources = []metaPair{
			{"memory", bytesText(float64(r.MemoryBytes)) + " of " + bytesText(float64(r.MemoryLimitBytes))},
			{"memory peak", bytesText(float64(r.MemoryMaxBytes))},
			{"OOM kills", strconv.FormatUint(r.OOMKills, 10)},
			{"CPU", strconv.FormatFloat(r.CPUSeconds, 'f', 2, 64) + " s"},
			{"processes", fmt.Sprintf("%d of %d", r.PIDs, r.PIDsLimit)},
		}
	}
	return pm
}
