package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newSecretCmd is `cove secret`: the team's secrets, whose values network rules put into a
// sandbox's requests on the host side. Values are read from stdin, never from arguments.
func newSecretCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Create, list, update and delete the team's secrets (values are write-only, read from stdin)",
		Long: `A secret's value never comes back from Cove. A sandbox's header rule names it with a
placeholder, ${e2b.secrets.NAME}, which Cove's egress proxy resolves on the host:

  printf %s "$OPENAI_KEY" | cove secret create openai
  cove sandbox create --header-rule 'api.openai.com:Authorization=Bearer ${e2b.secrets.openai}'`,
	}
	f.register(cmd)
	readValue := func() (string, error) {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10+1))
		if err != nil {
			return "", err
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("no value on stdin")
		}
		return v, nil
	}
	// write is create (update false) or update: the value from stdin, the answer printed.
	write := func(update bool) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			v, err := readValue()
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			if !update {
				s, err := c.CreateSecret(cmd.Context(), args[0], v, nil)
				if err != nil {
					return cliError(err)
				}
				fmt.Println(s.ID)
				return nil
			}
			s, err := c.UpdateSecret(cmd.Context(), args[0], v, nil)
			if err != nil {
				return cliError(err)
			}
			fmt.Printf("%s version %d\n", s.Name, s.CurrentVersion)
			return nil
		}
	}
	create := &cobra.Command{Use: "create NAME", Short: "Create a secret; its value comes from stdin", Args: cobra.ExactArgs(1), RunE: write(false)}
	update := &cobra.Command{Use: "update SECRET", Short: "Store a new version of a secret; its value comes from stdin", Args: cobra.ExactArgs(1), RunE: write(true)}
	list := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "List the team's secrets (no values)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			all, err := c.Secrets(cmd.Context())
			if err != nil {
				return cliError(err)
			}
			if f.asJSON {
				return printJSON(all)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tVERSION\tUPDATED")
			for _, s := range all {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Name, s.ID, s.CurrentVersion, s.UpdatedAt.Local().Format(time.RFC3339))
			}
			return tw.Flush()
		}}
	f.jsonFlag(list)
	rm := &cobra.Command{Use: "rm SECRET...", Short: "Delete secrets and all their versions", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			for _, a := range args {
				if err := c.DeleteSecret(cmd.Context(), a); err != nil {
					return cliError(err)
				}
			}
			return nil
		}}
	cmd.AddCommand(create, update, list, rm)
	return cmd
}
