package main

import (
	"github.com/spf13/cobra"
)

func newEnvdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "envd",
		Short: "Run the in-sandbox daemon (E2B envd wire protocol)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return nil
		},
	}
	return cmd
}
