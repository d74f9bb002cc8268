package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

// parseVolumeMount reads --volume NAME:PATH[:ro].
func parseVolumeMount(v string) (cove.VolumeMount, error) {
	name, path, ok := strings.Cut(v, ":")
	var m cove.VolumeMount
	if p, mode, hasMode := strings.Cut(path, ":"); hasMode {
		if mode != "ro" && mode != "rw" {
			return m, fmt.Errorf("--volume %q: the mode after PATH is ro or rw, not %q", v, mode)
		}
		path, m.ReadOnly = p, mode == "ro"
	}
	if !ok || name == "" || path == "" {
		return m, fmt.Errorf("--volume %q: want NAME:PATH or NAME:PATH:ro", v)
	}
	m.Name, m.Path = name, path
	return m, nil
}

// volumeMountsSummary renders a sandbox's mounts as --volume takes them: NAME:PATH[:ro].
func volumeMountsSummary(mounts []cove.VolumeMount) string {
	var parts []string
	for _, m := range mounts {
		p := m.Name + ":" + m.Path
		if m.ReadOnly {
			p += ":ro"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// listVolumes prints the team's volumes: id, name, size and what they use.
func listVolumes(cmd *cobra.Command, f *apiFlags) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	all, err := c.ListVolumes(cmd.Context())
	if err != nil {
		return cliError(err)
	}
	if f.asJSON {
		return printJSON(all)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSIZE\tUSED")
	for _, v := range all {
		size, used := "no limit", "-"
		if v.SizeBytes > 0 {
			size, used = humanBytes(v.SizeBytes), fmt.Sprintf("%s (%d%%)", humanBytes(v.UsedBytes), v.UsedBytes*100/v.SizeBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.ID, v.Name, size, used)
	}
	return tw.Flush()
}

// volumeContentCmds are the verbs on a volume's files, through the volume content API.
func volumeContentCmds(f *apiFlags) []*cobra.Command {
	var depth int
	ls := &cobra.Command{
		Use:   "ls [VOLUME [PATH]]",
		Short: "List the team's volumes (size, used), or a directory of a volume (its root by default)",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return listVolumes(cmd, f)
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			path := "/"
			if len(args) == 2 {
				path = args[1]
			}
			entries, err := c.VolumeFiles(args[0]).List(cmd.Context(), path, depth)
			if err != nil {
				return cliError(err)
			}
			if f.asJSON {
				return printJSON(entries)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', 0)
			for _, e := range entries {
				name := e.Path
				if e.Type == cove.VolumeFileDirectory {
					name += "/"
				}
				if e.Target != "" {
					name += " -> " + e.Target
				}
				fmt.Fprintf(tw, "%#o\t%d\t%d\t%d\t%s\t%s\n", e.Mode, e.UID, e.GID, e.Size, e.Mtime.Local().Format("2006-01-02 15:04"), name)
			}
			return tw.Flush()
		},
	}
	ls.Flags().IntVar(&depth, "depth", 1, "levels of subdirectories to list")
	f.jsonFlag(ls)
	cat := &cobra.Command{
		Use:   "cat VOLUME PATH",
		Short: "Print a file of a volume",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			rc, err := c.VolumeFiles(args[0]).Open(cmd.Context(), args[1])
			if err != nil {
				return cliError(err)
			}
			defer rc.Close()
			_, err = io.Copy(os.Stdout, rc)
			return err
		},
	}
	var parents bool
	put := &cobra.Command{
		Use:   "put VOLUME LOCAL PATH",
		Short: "Upload a local file (- for stdin) to PATH in a volume, replacing it all or nothing",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var in io.Reader = os.Stdin
			if args[1] != "-" {
				file, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer file.Close()
				in = file
			}
			e, err := c.VolumeFiles(args[0]).Write(cmd.Context(), args[2], in, cove.VolumeWriteOptions{Force: parents})
			if err != nil {
				return cliError(err)
			}
			fmt.Printf("%s\t%d bytes\n", e.Path, e.Size)
			return nil
		},
	}
	put.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parent directories")
	mkdir := &cobra.Command{
		Use:   "mkdir VOLUME PATH",
		Short: "Make a directory in a volume",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			_, err = c.VolumeFiles(args[0]).MakeDir(cmd.Context(), args[1], cove.VolumeWriteOptions{Force: parents})
			return cliError(err)
		},
	}
	mkdir.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parent directories")
	rm := &cobra.Command{
		Use:   "rm VOLUME [PATH...]",
		Short: "Delete a volume (by id or name) and its files; with PATHs, remove those paths from it instead",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				return cliError(c.DeleteVolume(cmd.Context(), args[0]))
			}
			files := c.VolumeFiles(args[0])
			for _, p := range args[1:] {
				if err := files.Remove(cmd.Context(), p); err != nil {
					return cliError(err)
				}
			}
			return nil
		},
	}
	return []*cobra.Command{ls, cat, put, mkdir, rm}
}
