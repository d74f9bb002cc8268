package main

import (
	"fmt"
	"os"
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
