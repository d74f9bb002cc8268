package main

import "github.com/spf13/cobra"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "cove",
		Short:         "Cove: self-hosted, E2B-compatible sandboxes whose every command, cancel and kill can be explained",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newEnvdCmd(), newServerCmd(), newAPIKeyCmd(), newTemplateCmd(), newTeamCmd(), newAdminCmd(),
		newSandboxCmd(), newExecCmd(), newFilesCmd(), newUsageCmd(), newSnapshotCmd(), newVolumeCmd(), newSecretCmd(), newNodeCmd())
	root.AddCommand(newObserveCmds()...)
	return root
}
