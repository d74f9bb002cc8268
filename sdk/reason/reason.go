// Package reason holds Cove's closed vocabularies: why a sandbox was killed, why a client
// cancelled a stream, how and where a stream ended. Each is a named string with constants, a
// String that never returns "", and a Parse that rejects values outside the set.
//
// It imports nothing of Cove's: every package, the SDK and envd included, may use it.
package reason

import "fmt"

// parse is the shared body of every Parse function: s must be one of known.
func parse[T ~string](kind, s string, known []T) (T, error) {
	for _, k := range known {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown %s %q", kind, s)
}
