package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

func newLogsCmd(f *apiFlags) *cobra.Command {
	var requestID, search, level string
	var fields []string
	var follow bool
	var limit int
	cmd := &cobra.Command{
		Use:   "logs SANDBOX",
		Short: "Show a sandbox's logs: its commands' output and envd's lines, labelled with its metadata",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pairs, err := parsePairs("field", fields)
			if err != nil {
				return err
			}
			client, err := f.client()
			if err != nil {
				return err
			}
			q := cove.LogQuery{RequestID: requestID, Search: search, Level: level, Fields: pairs, Limit: limit}
			for {
				page, err := client.Logs(cmd.Context(), args[0], q)
				if err != nil {
					return err
				}
				for _, l := range page.Logs {
					if f.asJSON {
						b, _ := json.Marshal(l)
						fmt.Println(string(b))
						continue
					}
					where := l.Fields["source"]
					if s := l.Fields["stream"]; s != "" {
						where += " " + s
					}
					if p := l.Fields["process.pid"]; p != "" && p != "0" {
						where += " pid " + p
					}
					fmt.Printf("%s %-5s [%s] %s\n", l.Timestamp.Format(time.RFC3339Nano), l.Level, where, l.Message)
				}
				if page.NextCursor != nil && *page.NextCursor != "" {
					q.Cursor = *page.NextCursor
					continue
				}
				if !follow {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "only lines of this request")
	cmd.Flags().StringVar(&search, "search", "", "only lines containing every word (or a \"quoted phrase\")")
	cmd.Flags().StringVar(&level, "level", "", "minimum level: debug, info, warn or error")
	cmd.Flags().StringArrayVar(&fields, "field", nil, "only lines whose field KEY has VALUE, KEY=VALUE (repeatable; e.g. taskId=t-42)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().IntVar(&limit, "limit", 1000, "lines per page")
	f.jsonFlag(cmd)
	return cmd
}
