package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/server"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/templates"
)

// printJSON writes v as indented JSON, for --json.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newAPIKeyCmd() *cobra.Command {
	var data, state, team string
	var asJSON bool
	cmd := &cobra.Command{Use: "apikey", Short: "Create, list and revoke API keys (works on the data dir, beside a running server)"}
	cmd.PersistentFlags().StringVar(&data, "data", envOr("COVE_DATA", "/var/lib/cove"), "data directory [$COVE_DATA]")
	stateFlag(cmd, &state)
	cmd.PersistentFlags().StringVar(&team, "team", "", "team id; the only team when there is one")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")

	// withTeamStore opens the data dir's store once and resolves the team on it (--team, or
	// the only one there is) for fn.
	withTeamStore := func(cmd *cobra.Command, fn func(ctx context.Context, db store.DB, teamID string) error) error {
		ctx := cmd.Context()
		db, err := server.OpenStore(ctx, data, state)
		if err != nil {
			return err
		}
		defer db.Close()
		teamID := team
		if teamID == "" {
			teams, err := db.ListTeams(ctx)
			if err != nil {
				return err
			}
			switch len(teams) {
			case 0:
				return fmt.Errorf("no team yet: start `cove server` once, or create one")
			case 1:
				teamID = teams[0].ID
			default:
				return fmt.Errorf("%d teams: name one with --team", len(teams))
			}
		}
		return fn(ctx, db, teamID)
	}

	create := &cobra.Command{
		Use: "create NAME", Short: "Create an API key; it is printed once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTeamStore(cmd, func(ctx context.Context, db store.DB, teamID string) error {
				key, rec, err := db.CreateAPIKey(ctx, teamID, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(map[string]any{"id": rec.ID, "team": rec.TeamID, "name": rec.Name, "key": key})
				}
				fmt.Printf("%s\n(id %s, team %s: the key is shown only now)\n", key, rec.ID, rec.TeamID)
				return nil
			})
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "List a team's API keys", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withTeamStore(cmd, func(ctx context.Context, db store.DB, teamID string) error {
				keys, err := db.ListAPIKeys(ctx, teamID)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(keys)
				}
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tKEY\tCREATED\tLAST USED\tREVOKED")
				for _, k := range keys {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Mask, k.CreatedAt.Format(time.RFC3339), when(k.LastUsed), when(k.RevokedAt))
				}
				return tw.Flush()
			})
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke an API key", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTeamStore(cmd, func(ctx context.Context, db store.DB, teamID string) error {
				if err := db.RevokeAPIKey(ctx, teamID, args[0]); err != nil {
					return fmt.Errorf("revoke %s: %w", args[0], err)
				}
				fmt.Println("revoked", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func newTemplateCmd() *cobra.Command {
	var data, templateDir string
	var asJSON bool
	cmd := &cobra.Command{Use: "template", Short: "Build, list and remove sandbox templates (works on the data dir)"}
	cmd.PersistentFlags().StringVar(&data, "data", envOr("COVE_DATA", "/var/lib/cove"), "data directory [$COVE_DATA]")
	cmd.PersistentFlags().StringVar(&templateDir, "templates", envOr("COVE_TEMPLATES", ""), "template store directory; <data>/templates when empty [$COVE_TEMPLATES]")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")

	var from, dockerfilePath, mirror string
	var run, buildArgs []string
	var force, replace bool
	buildCmd := &cobra.Command{
		Use:   "build NAME [CONTEXT]",
		Short: "Build a template: the base definition (templates/base) when --from and -f are empty, else layers of --run steps on --from T (cached), or of -f Dockerfile",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ts, _, err := server.OpenTemplates(cmd.Context(), data, templateDir)
			if err != nil {
				return err
			}
			spec := build.Spec{Name: args[0], From: from, Run: run, Force: force, Replace: replace, Mirror: mirror}
			switch {
			case dockerfilePath == "" && from == "":
				if len(run) > 0 || len(args) > 1 {
					return fmt.Errorf("--run and a build context need --from or -f: without them the build is the base definition")
				}
				base, err := templates.BaseSpec(ts, args[0], mirror)
				if err != nil {
					return err
				}
				base.Force, base.Replace = force, replace
				spec = base
			case dockerfilePath != "":
				ctxDir := "."
				if len(args) > 1 {
					ctxDir = args[1]
				}
				if spec, err = dockerfileSpec(cmd.Context(), ts, spec, dockerfilePath, ctxDir, buildArgs); err != nil {
					return err
				}
			case len(args) > 1:
				return fmt.Errorf("a build context is for -f Dockerfile builds")
			}
			t, err := ts.Build(cmd.Context(), spec, os.Stdout)
			if err != nil {
				if log := ts.FailedLog(args[0]); log != "" {
					return fmt.Errorf("%w (build log: %s)", err, log)
				}
				return err
			}
			if asJSON {
				return printJSON(t)
			}
			fmt.Printf("template %s ready: %d MiB in %.1f s\n", t.Name, t.SizeBytes>>20, t.BuildTime)
			return nil
		},
	}
	buildCmd.Flags().StringVar(&from, "from", "", "template to start from")
	buildCmd.Flags().StringArrayVar(&run, "run", nil, "shell command to run in the new template (repeatable, in order)")
	buildCmd.Flags().StringVarP(&dockerfilePath, "file", "f", "", "build from this Dockerfile (FROM a template, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT)")
	buildCmd.Flags().StringArrayVar(&buildArgs, "build-arg", nil, "a Dockerfile ARG value, KEY=VALUE (repeatable)")
	buildCmd.Flags().BoolVar(&force, "skip-cache", false, "rebuild every step instead of reusing cached layers")
	buildCmd.Flags().BoolVar(&replace, "replace", false, "replace a template of the same name when the build succeeds")
	buildCmd.Flags().StringVar(&mirror, "mirror", "", "Debian mirror URL a BOOTSTRAP line downloads from; the host's apt source when empty")

	list := &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List templates with the disk each owns and shares with others", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, _, err := server.OpenTemplates(cmd.Context(), data, templateDir)
			if err != nil {
				return err
			}
			all, err := ts.List()
			if err != nil {
				return err
			}
			use, err := ts.Usage()
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					*template.Template
					template.Usage
				}
				rows := make([]row, len(all))
				for i, t := range all {
					rows[i] = row{t, use[t.Name]}
				}
				return printJSON(rows)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tFROM\tLAYERS\tOWN\tSHARED\tSTART SNAPSHOT\tCREATED")
			for _, t := range all {
				u := use[t.Name]
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, t.From, len(t.Layers), humanBytes(u.Own), humanBytes(u.Shared), startSnapshotColumn(t), t.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use: "rm NAME", Short: "Remove a template", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ts, _, err := server.OpenTemplates(cmd.Context(), data, templateDir)
			if err != nil {
				return err
			}
			return ts.Remove(args[0])
		},
	}
	var collectLogs bool
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Change a template's settings: --collect-logs=false stops collecting its sandboxes' command output",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("collect-logs") {
				return fmt.Errorf("nothing to set: give --collect-logs=true or --collect-logs=false")
			}
			ts, _, err := server.OpenTemplates(cmd.Context(), data, templateDir)
			if err != nil {
				return err
			}
			if err := ts.SetCollectLogs(args[0], collectLogs); err != nil {
				return err
			}
			fmt.Printf("template %s: collect logs %v (for sandboxes created from now on)\n", args[0], collectLogs)
			return nil
		},
	}
	set.Flags().BoolVar(&collectLogs, "collect-logs", true, "collect the command output of this template's sandboxes")
	key := &cobra.Command{
		Use:   "base-key",
		Short: "Print the key of this cove's base template definition (caches of built bases are keyed by it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Println(templates.BaseKey())
			return nil
		},
	}
	open := func(ctx context.Context) (*build.Builder, error) {
		ts, _, err := server.OpenTemplates(ctx, data, templateDir)
		return ts, err
	}
	cmd.AddCommand(buildCmd, list, rm, set, key, newTemplatePushCmd(), importImageCmd(open))
	cmd.AddCommand(newTemplateAPICmds()...)
	return cmd
}

// humanBytes prints a size in KiB, MiB or GiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
}

func newTeamCmd() *cobra.Command {
	var data, state string
	var asJSON bool
	cmd := &cobra.Command{Use: "team", Short: "Create and list teams (works on the data dir, beside a running server)"}
	cmd.PersistentFlags().StringVar(&data, "data", envOr("COVE_DATA", "/var/lib/cove"), "data directory [$COVE_DATA]")
	stateFlag(cmd, &state)
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	create := &cobra.Command{
		Use: "create NAME", Short: "Create a team; give it keys with `cove apikey create --team ID`", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := server.OpenStore(cmd.Context(), data, state)
			if err != nil {
				return err
			}
			defer db.Close()
			team, err := db.CreateTeam(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(team)
			}
			fmt.Println(team.ID)
			return nil
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "List teams", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := server.OpenStore(cmd.Context(), data, state)
			if err != nil {
				return err
			}
			defer db.Close()
			teams, err := db.ListTeams(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(teams)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tCREATED")
			for _, t := range teams {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(create, list)
	return cmd
}

// adminToken reads the data dir's admin token.
func adminToken(data string) (string, error) {
	b, err := os.ReadFile(server.AdminTokenFile(data))
	if err != nil {
		return "", fmt.Errorf("read the admin token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func newAdminCmd() *cobra.Command {
	var data, apiURL string
	cmd := &cobra.Command{Use: "admin", Short: "Operator actions on any team's sandboxes (needs the data dir's admin token)"}
	cmd.PersistentFlags().StringVar(&data, "data", envOr("COVE_DATA", "/var/lib/cove"), "data directory holding admin-token [$COVE_DATA]")
	cmd.PersistentFlags().StringVar(&apiURL, "api-url", envOr("COVE_API_URL", "http://127.0.0.1:3000"), "Cove server URL [$COVE_API_URL]")
	kill := &cobra.Command{
		Use: "kill SANDBOX", Short: "Kill any team's sandbox, recorded with kill reason admin", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			token, err := adminToken(data)
			if err != nil {
				return err
			}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodDelete, strings.TrimRight(apiURL, "/")+"/admin/sandboxes/"+args[0], nil)
			if err != nil {
				return err
			}
			req.Header.Set(api.HeaderAdminToken, token)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusNoContent {
				b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
				return fmt.Errorf("kill %s: %s: %s (request id %s)", args[0], res.Status, strings.TrimSpace(string(b)), res.Header.Get("X-E2B-Request-Id"))
			}
			fmt.Println("killed", args[0], "(kill reason admin)")
			return nil
		},
	}
	var asJSON bool
	status := &cobra.Command{
		Use: "status", Short: "What each store keeps, for how long, and how big it is now", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := adminToken(data)
			if err != nil {
				return err
			}
			c := cove.NewClient(cove.Config{APIURL: apiURL, AdminToken: token})
			st, err := c.AdminStatus(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(st)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DATASET\tROWS\tSIZE\tOLDEST\tKEEPS\tCAP\tPRUNED")
			for _, s := range st {
				oldest, keeps, capRows := "-", "forever", "none"
				if !s.Oldest.IsZero() {
					oldest = time.Since(s.Oldest).Round(time.Second).String() + " ago"
				}
				if s.TTLSeconds > 0 {
					keeps = (time.Duration(s.TTLSeconds) * time.Second).String()
				}
				if s.MaxRows > 0 {
					capRows = strconv.FormatInt(s.MaxRows, 10)
				}
				fmt.Fprintf(tw, "%s\t%d\t%.1f MiB\t%s\t%s\t%s\t%d\n", s.Dataset, s.Rows, float64(s.Bytes)/(1<<20), oldest, keeps, capRows, s.PrunedTotal)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			usage, err := c.AdminDisk(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Println()
			return printDiskUsage(usage)
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var diskJSON bool
	disk := &cobra.Command{
		Use: "disk", Short: "What each team's paused sandboxes and snapshots take on disk", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := adminToken(data)
			if err != nil {
				return err
			}
			usage, err := cove.NewClient(cove.Config{APIURL: apiURL, AdminToken: token}).AdminDisk(cmd.Context())
			if err != nil {
				return err
			}
			if diskJSON {
				return printJSON(usage)
			}
			return printDiskUsage(usage)
		},
	}
	disk.Flags().BoolVar(&diskJSON, "json", false, "print JSON")
	cmd.AddCommand(kill, status, disk)
	return cmd
}

// printDiskUsage prints each team's snapshot disk usage as a table.
func printDiskUsage(usage []cove.DiskUsage) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEAM\tPAUSED\tPAUSED SIZE\tSNAPSHOTS\tSNAPSHOT SIZE")
	for _, u := range usage {
		fmt.Fprintf(tw, "%s\t%d\t%.1f MiB\t%d\t%.1f MiB\n", u.TeamID, u.PausedSandboxes, float64(u.PausedBytes)/(1<<20), u.Snapshots, float64(u.SnapshotBytes)/(1<<20))
	}
	if len(usage) == 0 {
		fmt.Fprintln(tw, "(no team has a paused sandbox or a snapshot on disk)")
	}
	return tw.Flush()
}

// startSnapshotColumn describes a template's start snapshot for `cove template ls`: its size
// and the ready-check wait it saves each create; "-" without a start command, "none" for a
// start command sandboxes run at create.
func startSnapshotColumn(t *template.Template) string {
	switch {
	case t.StartSnapshot != nil:
		return fmt.Sprintf("%s, ready %d ms", humanBytes(t.StartSnapshot.Bytes), t.StartSnapshot.ReadyMS)
	case t.StartCmd != "" || t.ReadyCmd != "":
		return "none"
	}
	return "-"
}

// stateFlag is --state of the verbs that work on the server's store: where its records live,
// as cove server's --state says.
func stateFlag(cmd *cobra.Command, state *string) {
	cmd.PersistentFlags().StringVar(state, "state", envOr("COVE_STATE", ""), "where the server keeps its records, as its --state: sqlite (the default), sqlite:///PATH or postgres://… [$COVE_STATE]")
}
