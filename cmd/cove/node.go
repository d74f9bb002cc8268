package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

// newNodeCmd is `cove node list|drain|activate`: a cluster's nodes, through any node's API
// and the data dir's admin token.
func newNodeCmd() *cobra.Command {
	var data, apiURL string
	var asJSON bool
	cmd := &cobra.Command{Use: "node", Short: "A cluster's nodes: their state, capacity and sandboxes; drain one (needs the admin token)"}
	cmd.PersistentFlags().StringVar(&data, "data", envOr("COVE_DATA", "/var/lib/cove"), "data directory holding admin-token [$COVE_DATA]")
	cmd.PersistentFlags().StringVar(&apiURL, "api-url", envOr("COVE_API_URL", "http://127.0.0.1:3000"), "any node's URL [$COVE_API_URL]")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	client := func() (*cove.Client, error) {
		token, err := adminToken(data)
		if err != nil {
			return nil, err
		}
		return cove.NewClient(cove.Config{APIURL: apiURL, AdminToken: token}), nil
	}
	list := &cobra.Command{
		Use: "list", Short: "Every node with its state, capacity, sandboxes and last heartbeat", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			nodes, err := c.Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(nodes)
			}
			return printNodes(nodes)
		},
	}
	state := func(use, short string, do func(*cove.Client, *cobra.Command, string) (*cove.Node, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := client()
				if err != nil {
					return err
				}
				n, err := do(c, cmd, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(n)
				}
				return printNodes([]cove.Node{*n})
			},
		}
	}
	drain := state("drain", "Stop placing sandboxes on the node", func(c *cove.Client, cmd *cobra.Command, name string) (*cove.Node, error) {
		return c.DrainNode(cmd.Context(), name)
	})
	activate := state("activate", "Let a drained node take sandboxes again", func(c *cove.Client, cmd *cobra.Command, name string) (*cove.Node, error) {
		return c.ActivateNode(cmd.Context(), name)
	})
	cmd.AddCommand(list, drain, activate)
	return cmd
}

func printNodes(nodes []cove.Node) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tSANDBOXES\tSTARTING\tVCPUS\tMEMORY\tHEARTBEAT\tURL\tTEMPLATES")
	for _, n := range nodes {
		beat := time.Since(n.HeartbeatAt).Round(time.Second).String() + " ago"
		if n.LostAt != nil {
			beat += ", lost " + n.LostAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d/%d\t%d/%d\t%d/%d MB\t%s\t%s\t%s\n", n.Name, n.State, n.Sandboxes, n.MaxSandboxes,
			n.Starting, n.MaxStarts, n.UsedVCPUs, n.VCPUs, n.UsedMemoryMB, n.MemoryMB, beat, n.AdvertiseURL, strings.Join(n.Templates, ","))
	}
	return tw.Flush()
}
