package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// otelFlag adds --otel-endpoint, defaulting to $COVE_OTEL_ENDPOINT, then the standard
// $OTEL_EXPORTER_OTLP_ENDPOINT.
func otelFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "otel-endpoint", envOr("COVE_OTEL_ENDPOINT", envOr("OTEL_EXPORTER_OTLP_ENDPOINT", "")),
		"OTLP/HTTP collector base URL (http://127.0.0.1:4318) for traces and logs; off when empty [$COVE_OTEL_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT]")
}

// startOTel sets OpenTelemetry up for service and returns what flushes it at exit (a no-op
// when endpoint is "").
func startOTel(ctx context.Context, endpoint, service string) (stop func(), err error) {
	shutdown, err := telemetry.SetupOTel(ctx, telemetry.OTelConfig{Endpoint: endpoint, ServiceName: service, Insecure: true})
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}
