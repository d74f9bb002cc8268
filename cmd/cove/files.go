package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

func newFilesCmd() *cobra.Command {
	var f apiFlags
	var user string
	cmd := &cobra.Command{
		Use:   "files",
		Short: "List, read, upload, download and remove files in a sandbox",
	}
	f.register(cmd)
	cmd.PersistentFlags().StringVarP(&user, "user", "u", "", "act as this user of the sandbox")
	as := func() cove.Option { return cove.User(user) }
	cmd.AddCommand(filesLsCmd(&f, as), filesCatCmd(&f, as), filesPutCmd(&f, as), filesGetCmd(&f, as), filesRmCmd(&f, as),
		filesURLCmd(&f, as), filesWatchCmd(&f, as))
	return cmd
}

func filesLsCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	var depth uint32
	cmd := &cobra.Command{
		Use:               "ls SANDBOX [PATH]",
		Short:             "List a directory (the user's home by default)",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "."
			if len(args) == 2 {
				path = args[1]
			}
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			entries, err := sb.Files.List(cmd.Context(), path, as(), cove.Depth(depth))
			if err != nil {
				return cliError(err)
			}
			if f.asJSON {
				return printJSON(entries)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', 0)
			for _, e := range entries {
				name := e.Path
				if e.SymlinkTarget != "" {
					name += " -> " + e.SymlinkTarget
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", e.Permissions, e.Owner, e.Group, e.Size,
					e.ModifiedTime.Local().Format(time.DateTime), name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().Uint32Var(&depth, "depth", 1, "how many levels to descend")
	f.jsonFlag(cmd)
	return cmd
}

func filesCatCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	return &cobra.Command{
		Use:               "cat SANDBOX PATH...",
		Short:             "Write files to stdout",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			for _, p := range args[1:] {
				if err := download(cmd, sb, p, os.Stdout, as()); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func filesPutCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	var metadata []string
	cmd := &cobra.Command{
		Use:               "put SANDBOX LOCAL REMOTE",
		Short:             "Upload a local file (- for stdin), making REMOTE's parent directories",
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = os.Stdin
			if args[1] != "-" {
				file, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer file.Close()
				r = file
			}
			md, err := parsePairs("metadata", metadata)
			if err != nil {
				return err
			}
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			_, err = sb.Files.WriteFrom(cmd.Context(), args[2], r, as(), cove.Metadata(md))
			return cliError(err)
		},
	}
	cmd.Flags().StringArrayVarP(&metadata, "metadata", "m", nil, "metadata KEY=VALUE stored on the file as a user.e2b.* attribute (repeatable)")
	return cmd
}

func filesGetCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	return &cobra.Command{
		Use:               "get SANDBOX REMOTE LOCAL",
		Short:             "Download a file to LOCAL (- for stdout)",
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if args[2] == "-" {
				return download(cmd, sb, args[1], os.Stdout, as())
			}
			file, err := os.Create(args[2])
			if err != nil {
				return err
			}
			if err := download(cmd, sb, args[1], file, as()); err != nil {
				file.Close()
				os.Remove(args[2])
				return err
			}
			return file.Close()
		},
	}
}

func filesRmCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	return &cobra.Command{
		Use:               "rm SANDBOX PATH...",
		Short:             "Remove files, and directories with everything in them",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			for _, p := range args[1:] {
				if err := sb.Files.Remove(cmd.Context(), p, as()); err != nil {
					return cliError(err)
				}
			}
			return nil
		},
	}
}

// download copies a sandbox file to w.
func download(cmd *cobra.Command, sb *cove.Sandbox, path string, w io.Writer, opts ...cove.Option) error {
	r, err := sb.Files.Open(cmd.Context(), path, opts...)
	if err != nil {
		return cliError(err)
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

func filesURLCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	var write bool
	var expire time.Duration
	cmd := &cobra.Command{
		Use:   "url SANDBOX PATH",
		Short: "Print a signed URL that downloads PATH (or uploads it, with --write) without a key",
		Long: `cove files url prints a URL that reads one file of a secure sandbox with a plain GET, or
with --write writes it with a POST of the file (multipart "file" part or octet-stream). The
URL is signed with the sandbox's access token; --expire makes it stop working after a while.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			opts := []cove.Option{as()}
			if expire > 0 {
				opts = append(opts, cove.SignatureExpiration(expire))
			}
			url := sb.DownloadURL
			if write {
				url = sb.UploadURL
			}
			u, err := url(args[1], opts...)
			if err != nil {
				return cliError(err)
			}
			fmt.Println(u)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&write, "write", "w", false, "sign an upload URL instead of a download URL")
	durationFlag(cmd, &expire, "expire", 0, "the URL stops working after this long (300, 90s, 5m); never when 0")
	return cmd
}

func filesWatchCmd(f *apiFlags, as func() cove.Option) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:               "watch SANDBOX PATH",
		Short:             "Print the changes in a directory as they happen, one per line, until Ctrl-C",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := f.sandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			opts := []cove.Option{as()}
			if recursive {
				opts = append(opts, cove.Recursive())
			}
			w, err := sb.Files.Watch(cmd.Context(), args[1], opts...)
			if err != nil {
				return cliError(err)
			}
			if !f.asJSON {
				fmt.Fprintf(os.Stderr, "watching %s in %s\n", args[1], sb.ID)
			}
			for ev := range w.Events() {
				if f.asJSON {
					if err := json.NewEncoder(os.Stdout).Encode(ev); err != nil {
						return err
					}
					continue
				}
				fmt.Printf("%s\t%s\n", ev.Type, ev.Name)
			}
			if cmd.Context().Err() != nil {
				return nil
			}
			return cliError(w.Err())
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch subdirectories too")
	f.jsonFlag(cmd)
	return cmd
}
