package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	cove "github.com/cove-dev/cove/sdk"
)

// A create body's field that Cove would silently ignore is a setting the caller believes
// holds and does not: `allowInternetAccess: false` (E2B's SDK option name, not its wire name)
// would leave the sandbox on the internet. So a create refuses, with a 400 naming the field
// and its spelling,
//
//   - a field spelled like one of the create's own but not the same (case aside, as Go reads
//     JSON): "allowInternetAccess", "allow-internet-access", "template_id", "env_vars";
//   - a field of the network object sent at the top level ("allowPublicTraffic", "allowOut").
//
// Fields Cove does not know at all are still ignored, as E2B's API grows.

// createFields and networkFields map a field's folded spelling (lower case, no '_' or '-')
// to its one spelling.
var (
	createFields  = jsonFields(reflect.TypeFor[createBody]())
	networkFields = jsonFields(reflect.TypeFor[cove.NetworkRules]())
)

// jsonFields is the folded spelling → spelling of t's JSON fields, embedded ones included.
func jsonFields(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[foldField(name)] = name
	}
	return out
}

// foldField is a field name without case, '_' or '-'.
func foldField(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
}

// checkCreateFields refuses the misspelled and misplaced fields of a create body, raw.
func checkCreateFields(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil // not an object: the decode into createBody said so already
	}
	for name := range fields {
		folded := foldField(name)
		if want, ok := createFields[folded]; ok {
			if !strings.EqualFold(name, want) {
				return fmt.Errorf("%w: unknown field %q: the create body spells it %q", errBadRequest, name, want)
			}
			continue
		}
		if want, ok := networkFields[folded]; ok {
			return fmt.Errorf("%w: unknown field %q: it belongs in the network object, as network.%s", errBadRequest, name, want)
		}
	}
	return nil
}
