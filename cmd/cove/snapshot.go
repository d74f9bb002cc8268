package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

func sandboxForkCmd(f *apiFlags) *cobra.Command {
	var opts cove.ForkOptions
	cmd := &cobra.Command{
		Use:   "fork SANDBOX",
		Short: "Start copies of a running sandbox (its processes, memory and files) and print their ids",
		Long: `fork checkpoints the sandbox in place (it pauses for that time and keeps its id, timeout
and processes) and starts --count copies from that checkpoint, independent from then on.
Each copy's id is printed on its own line; a copy that failed is reported on stderr.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			results, err := call(f, func(c *cove.Client) ([]cove.ForkResult, error) { return c.Fork(cmd.Context(), args[0], opts) })
			if err != nil {
				return err
			}
			var failed []error
			for _, r := range results {
				if r.Err != nil {
					failed = append(failed, r.Err)
					continue
				}
				fmt.Println(r.Sandbox.ID)
			}
			return cliError(errors.Join(failed...))
		},
	}
	cmd.Flags().IntVar(&opts.Count, "count", 1, "how many copies")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 0, "each copy's time to live (the server's default when 0)")
	return cmd
}

func newSnapshotCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Keep a running sandbox's processes, memory and files as a snapshot; start sandboxes from it",
		Long: `A snapshot is a sandbox checkpointed in place and kept on disk. Start a sandbox from one with
cove sandbox create --template SNAPSHOT_ID (or the E2B SDK's Sandbox.create(snapshotId)).`,
	}
	f.register(cmd)
	create := &cobra.Command{
		Use:               "create SANDBOX",
		Short:             "Snapshot a running sandbox (it pauses for that time) and print the snapshot's id",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeSandboxID,
	}
	name := create.Flags().String("name", "", "a name to find the snapshot by")
	create.RunE = func(cmd *cobra.Command, args []string) error {
		sn, err := call(&f, func(c *cove.Client) (*cove.SnapshotInfo, error) {
			return c.CreateSnapshot(cmd.Context(), args[0], *name)
		})
		if err != nil {
			return err
		}
		fmt.Println(sn.ID)
		return nil
	}
	var filter cove.SnapshotFilter
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the team's snapshots, newest first, with the bytes each takes on disk",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := call(&f, func(c *cove.Client) ([]cove.SnapshotInfo, error) { return c.ListSnapshots(cmd.Context(), filter) })
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(all)
			}
			for _, sn := range all {
				fmt.Printf("%s\t%s\t%s\t%.1f MiB\t%s\n", sn.ID, sn.SandboxID, sn.CreatedAt.Local().Format(time.RFC3339),
					float64(sn.SizeBytes)/(1<<20), strings.Join(sn.Names, ","))
			}
			return nil
		},
	}
	list.Flags().StringVar(&filter.SandboxID, "sandbox", "", "only snapshots of this sandbox")
	list.Flags().StringVar(&filter.Name, "name", "", "only snapshots with this name")
	f.jsonFlag(list)
	rm := &cobra.Command{
		Use:   "rm SNAPSHOT",
		Short: "Delete a snapshot and its files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(func(c *cove.Client) error { return c.DeleteSnapshot(cmd.Context(), args[0]) })
		},
	}
	cmd.AddCommand(create, list, rm)
	return cmd
}

func newVolumeCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Named, persistent directories that outlive sandboxes: cove sandbox create --volume NAME:PATH mounts one",
	}
	f.register(cmd)
	var vopts cove.VolumeOptions
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Make a volume and print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			v, err := c.CreateVolumeWith(cmd.Context(), args[0], vopts)
			if err != nil {
				return cliError(err)
			}
			fmt.Println(v.ID)
			return nil
		},
	}
	create.Flags().IntVar(&vopts.SizeMB, "size-mb", 0, "the volume's size in MiB: writes past it get ENOSPC (0: the server's --volume-size-mb)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the team's volumes with their size and what they use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listVolumes(cmd, &f)
		},
	}
	f.jsonFlag(list)
	cmd.AddCommand(create, list)
	cmd.AddCommand(volumeContentCmds(&f)...)
	return cmd
}
