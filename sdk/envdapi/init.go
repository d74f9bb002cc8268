package envdapi

import "time"

// InitPath is envd's init endpoint: the host POSTs an Init there once envd answers /health,
// before the sandbox is handed to its client, and envd answers 204.
const InitPath = "/init"

// Init is the body of POST /init: what the control plane tells a new sandbox's envd. A nil
// field leaves envd's setting alone. The JSON names are E2B's, so E2B's control plane could
// send the same body; CollectOutput is Cove's own.
type Init struct {
	// EnvVars are the environment every process envd starts gets.
	EnvVars map[string]string `json:"envVars,omitempty"`
	// AccessToken, when set, is required of every call but /health (X-Access-Token).
	AccessToken *string `json:"accessToken,omitempty"`
	// DefaultUser and DefaultWorkdir are who processes run as, and where, when a call does
	// not say.
	DefaultUser    *string `json:"defaultUser,omitempty"`
	DefaultWorkdir *string `json:"defaultWorkdir,omitempty"`
	// CollectOutput switches the collection of processes' output lines (Cove's extension).
	CollectOutput *bool `json:"collectOutput,omitempty"`
	// Timestamp is the host's clock when it sent the init.
	Timestamp *time.Time `json:"timestamp,omitempty"`
}

// Port is where envd listens inside every sandbox, on the sandbox's own loopback.
const Port = 49983

// Version is the envd protocol version envd and the control plane report. E2B's SDKs switch
// features off below 0.6.4.
const Version = "0.6.4"
