package envdapi_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/sdk/envdapi"
)

func TestInitRoundTripsAndSpeaksE2BsNames(t *testing.T) {
	token, user, dir, collect := "tok", "user", "/home/user", false
	at := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   envdapi.Init
		want string
	}{
		{"an empty init sends an empty object", envdapi.Init{}, `{}`},
		{"every field goes under E2B's name", envdapi.Init{EnvVars: map[string]string{"A": "1"}, AccessToken: &token, DefaultUser: &user,
			DefaultWorkdir: &dir, CollectOutput: &collect, Timestamp: &at},
			`{"envVars":{"A":"1"},"accessToken":"tok","defaultUser":"user","defaultWorkdir":"/home/user","collectOutput":false,"timestamp":"2026-12-04T06:00:00Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			if err != nil || string(b) != tt.want {
				t.Fatalf("marshal: %s %v\nwant %s", b, err, tt.want)
			}
			var back envdapi.Init
			if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, tt.in) {
				t.Errorf("round trip: %+v %v, want %+v", back, err, tt.in)
			}
		})
	}
}
