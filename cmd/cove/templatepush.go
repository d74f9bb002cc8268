package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

// newTemplatePushCmd builds a template on a running server through the API (the SDK), the
// way E2B's Template builder does: steps are cached layers on the server.
func newTemplatePushCmd() *cobra.Command {
	var f apiFlags
	var def cove.TemplateDefinition
	var steps []string
	var opts cove.TemplateBuildOptions
	cmd := &cobra.Command{
		Use:   "push NAME",
		Short: "Build a template on the server from --from and --step lines (RUN cmd, COPY src dest, ENV k=v, WORKDIR dir, USER name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, s := range steps {
				st, err := parseStepFlag(s)
				if err != nil {
					return err
				}
				def.Steps = append(def.Steps, st)
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			opts.OnLog = func(e cove.BuildLogEntry) { fmt.Fprintln(os.Stderr, e.Message) }
			st, err := c.BuildTemplate(cmd.Context(), args[0], def, opts)
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(st)
			}
			fmt.Printf("template %s ready (build %s)\n", st.TemplateID, st.BuildID)
			return nil
		},
	}
	f.register(cmd)
	f.jsonFlag(cmd)
	cmd.Flags().StringVar(&def.FromTemplate, "from", "base", "template to build on")
	cmd.Flags().StringArrayVar(&steps, "step", nil, `a step, in order (repeatable): "RUN cmd", "COPY src dest", "ENV K=V", "WORKDIR dir", "USER name"`)
	cmd.Flags().StringVar(&def.StartCmd, "start-cmd", "", "command every sandbox of the template starts with")
	cmd.Flags().StringVar(&def.ReadyCmd, "ready-cmd", "", "command that exits 0 once the start command is ready")
	cmd.Flags().BoolVar(&def.Force, "skip-cache", false, "rebuild every step instead of reusing cached layers")
	cmd.Flags().StringVar(&opts.ContextDir, "context", ".", "directory COPY sources are relative to")
	cmd.Flags().IntVar(&opts.CPUCount, "cpu", 0, "CPUs of the template's sandboxes (0: the server's default)")
	cmd.Flags().IntVar(&opts.MemoryMB, "memory-mb", 0, "memory of the template's sandboxes in MiB (0: the server's default)")
	cmd.Flags().StringVar(&opts.Runtime, "runtime", "", "the engine the template's sandboxes must run on: runc, or runsc (gVisor); empty: the server's default")
	return cmd
}

// parseStepFlag reads one --step: the kind, then its arguments.
func parseStepFlag(s string) (cove.TemplateStep, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	rest = strings.TrimSpace(rest)
	st := cove.TemplateStep{Type: strings.ToUpper(kind)}
	switch st.Type {
	case "RUN", "WORKDIR", "USER":
		st.Args = []string{rest}
	case "COPY":
		st.Args = strings.Fields(rest)
	case "ENV":
		for _, kv := range strings.Fields(rest) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return st, fmt.Errorf("--step %q: ENV takes KEY=VALUE pairs", s)
			}
			st.Args = append(st.Args, k, v)
		}
	default:
		return st, fmt.Errorf("--step %q: unknown step %q (want RUN, COPY, ENV, WORKDIR or USER)", s, kind)
	}
	if rest == "" {
		return st, fmt.Errorf("--step %q: %s needs arguments", s, st.Type)
	}
	return st, nil
}

// newTemplateAPICmds are the template verbs that talk to a running server: tags, tag,
// untag, delete and status.
func newTemplateAPICmds() []*cobra.Command {
	verb := func(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, c *cove.Client, f *apiFlags, args []string) error) *cobra.Command {
		var f apiFlags
		cmd := &cobra.Command{Use: use, Short: short, Args: args, RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			return run(cmd, c, &f, args)
		}}
		f.register(cmd)
		f.jsonFlag(cmd)
		return cmd
	}
	tags := verb("tags NAME", "List a template's tags on the server", cobra.ExactArgs(1), func(cmd *cobra.Command, c *cove.Client, f *apiFlags, args []string) error {
		tags, err := c.TemplateTags(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if f.asJSON {
			return printJSON(tags)
		}
		for _, t := range tags {
			fmt.Printf("%s\t%s\t%s\n", t.Tag, t.BuildID, t.CreatedAt.Format("2006-01-02T15:04:05Z07:00"))
		}
		return nil
	})
	tag := verb("tag NAME[:TAG] NEWTAG...", "Tag a template's build on the server (sandboxes start from NAME:NEWTAG)", cobra.MinimumNArgs(2), func(cmd *cobra.Command, c *cove.Client, _ *apiFlags, args []string) error {
		return c.TagTemplate(cmd.Context(), args[0], args[1:]...)
	})
	untag := verb("untag NAME TAG...", "Remove tags of a template on the server", cobra.MinimumNArgs(2), func(cmd *cobra.Command, c *cove.Client, _ *apiFlags, args []string) error {
		return c.UntagTemplate(cmd.Context(), args[0], args[1:]...)
	})
	del := verb("delete NAME", "Delete a template on the server (and the layers nothing else uses)", cobra.ExactArgs(1), func(cmd *cobra.Command, c *cove.Client, _ *apiFlags, args []string) error {
		return c.DeleteTemplate(cmd.Context(), args[0])
	})
	status := verb("status NAME BUILD_ID", "Show a build's status and log on the server", cobra.ExactArgs(2), func(cmd *cobra.Command, c *cove.Client, f *apiFlags, args []string) error {
		st, err := c.TemplateBuild(cmd.Context(), args[0], args[1], 0)
		if err != nil {
			return err
		}
		if f.asJSON {
			return printJSON(st)
		}
		for _, e := range st.LogEntries {
			fmt.Println(e.Message)
		}
		fmt.Println("status:", st.Status)
		if sn := st.StartSnapshot; sn != nil {
			fmt.Printf("start snapshot: %.1f MiB, ready check passed in %d ms (build %s)\n", float64(sn.SizeBytes)/(1<<20), sn.ReadyMS, sn.BuildID)
		}
		if st.Reason != nil {
			fmt.Println("reason:", st.Reason.Message)
		}
		return nil
	})
	pool := verb("pool NAME N", "Keep N started sandboxes of a template ready for creates to claim (0: none); with $COVE_ADMIN_TOKEN set, any template's, such as base", cobra.ExactArgs(2), func(cmd *cobra.Command, c *cove.Client, f *apiFlags, args []string) error {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("the size %q is not a count of sandboxes", args[1])
		}
		p, err := c.SetTemplatePool(cmd.Context(), args[0], n)
		if err != nil {
			return err
		}
		if f.asJSON {
			return printJSON(p)
		}
		fmt.Printf("template %s: a pool of %d (%d ready now; it refills in the background)\n", p.Template, p.Size, p.Ready)
		return nil
	})
	pools := verb("pools", "List the warm pools: each template's size and how many are ready", cobra.NoArgs, func(cmd *cobra.Command, c *cove.Client, f *apiFlags, _ []string) error {
		ps, err := c.Pools(cmd.Context())
		if err != nil {
			return err
		}
		if f.asJSON {
			return printJSON(ps)
		}
		fmt.Println("TEMPLATE\tSIZE\tREADY\tLAST ERROR")
		for _, p := range ps {
			fmt.Printf("%s\t%d\t%d\t%s\n", p.Template, p.Size, p.Ready, p.LastError)
		}
		return nil
	})
	return []*cobra.Command{tags, tag, untag, del, status, pool, pools}
}
