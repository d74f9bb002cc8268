package main

import (
	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

func newWebhookCmd(f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "webhook", Short: "Manage signed webhooks for lifecycle events"}
	var evs []string
	var secret string
	// withClient runs fn with the CLI's SDK client.
	withClient := func(fn func(cmd *cobra.Command, c *cove.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			return fn(cmd, c, args)
		}
	}
	add := &cobra.Command{
		Use: "add URL", Short: "Register a webhook; its signing secret is printed once", Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, args []string) error {
			req := cove.WebhookRequest{URL: args[0], Events: evs}
			if secret != "" {
				req.Secret = &secret
			}
			out, err := c.AddWebhook(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printJSON(out)
		}),
	}
	add.Flags().StringArrayVar(&evs, "event", nil, "event type to deliver (repeatable; all when none)")
	add.Flags().StringVar(&secret, "secret", "", "signing secret (generated when empty)")
	list := &cobra.Command{
		Use: "list", Short: "List webhooks", Args: cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, _ []string) error {
			out, err := c.Webhooks(cmd.Context())
			if err != nil {
				return err
			}
			return printJSON(out)
		}),
	}
	rm := &cobra.Command{
		Use: "rm ID", Short: "Remove a webhook", Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, args []string) error {
			return c.RemoveWebhook(cmd.Context(), args[0])
		}),
	}
	deliveries := &cobra.Command{
		Use: "deliveries ID", Short: "Show a webhook's deliveries and every attempt", Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, args []string) error {
			out, err := c.WebhookDeliveries(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(out)
		}),
	}
	cmd.AddCommand(add, list, rm, deliveries)
	return cmd
}
