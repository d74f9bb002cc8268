// Command taskid shows the task-id pattern: tag a sandbox with the caller's task id
// (metadata.taskId), and log every step as JSON with the task id and the sandbox id, so
// one grep for the task finds the sandbox, and the sandbox id finds Cove's own lines.
//
//	COVE_API_URL=http://127.0.0.1:3000 COVE_API_KEY=... go run ./examples/taskid [TASK-ID]
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

func main() {
	taskID := fmt.Sprintf("t-%d", time.Now().Unix())
	if len(os.Args) > 1 {
		taskID = os.Args[1]
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("taskId", taskID)
	if err := run(context.Background(), log, taskID); err != nil {
		fmt.Fprintln(os.Stderr, "taskid:", err) // the error names the request id
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, taskID string) error {
	client := cove.NewClient(cove.Config{}) // COVE_* or E2B_* variables
	sb, err := client.Create(ctx, cove.SandboxOptions{
		Timeout:  5 * time.Minute,
		Metadata: map[string]string{"taskId": taskID},
	})
	if err != nil {
		return err
	}
	// From here on every line carries the sandbox id too.
	log = log.With("sandbox.id", sb.ID)
	log.Info("sandbox created", "request_id", sb.RequestID())
	defer func() {
		err := sb.Kill(ctx)
		log.Info("sandbox killed", "error", errString(err))
	}()

	res, err := sb.Commands.Run(ctx, `echo "task $TASK_ID says hello from $(hostname)"`,
		cove.Envs(map[string]string{"TASK_ID": taskID}), cove.Timeout(30*time.Second))
	if err != nil {
		log.Error("command failed", "error", err, "request_id", cove.RequestIDOf(err))
		return err
	}
	log.Info("command done", "exit_code", res.ExitCode, "stdout", res.Stdout, "request_id", res.RequestID())
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
