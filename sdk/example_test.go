package cove_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// The examples need a running `cove server` and COVE_API_URL / COVE_API_KEY (or the E2B
// variables) in the environment, so they are compiled but not run, except the last.

func ExampleClient_Create() {
	ctx := context.Background()
	client := cove.NewClient(cove.Config{}) // COVE_* or E2B_* variables
	sb, err := client.Create(ctx, cove.SandboxOptions{Template: "base", Timeout: 10 * time.Minute})
	if err != nil {
		log.Fatal(err) // the error names the request id to look up in the server's logs
	}
	defer sb.Kill(ctx)

	res, err := sb.Commands.Run(ctx, "uname -a")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleCommands_Run() {
	ctx := context.Background()
	sb, err := cove.NewClient(cove.Config{}).Create(ctx, cove.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	_, err = sb.Commands.Run(ctx, "ls /nope",
		cove.OnStderr(func(s string) { fmt.Fprint(os.Stderr, s) }),
		cove.Timeout(30*time.Second))
	var exit *cove.CommandExitError
	if errors.As(err, &exit) {
		fmt.Printf("exit %d, envd logged it under request %s\n", exit.ExitCode, exit.RequestID)
	}
}

func ExampleCommandHandle_Disconnect() {
	ctx := context.Background()
	sb, err := cove.NewClient(cove.Config{}).Create(ctx, cove.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	h, err := sb.Commands.Start(ctx, "for i in $(seq 10); do echo $i; sleep 1; done", cove.Timeout(0))
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	h.Disconnect() // logs cancel.cause=disconnect; the loop keeps running

	again, err := sb.Commands.Connect(ctx, h.PID(), cove.OnStdout(func(s string) { fmt.Print(s) }))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := again.Wait(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleNotifyExit() {
	// Ctrl-C ends the context with ErrCallerExit: every stream cut by it logs
	// cancel.cause=caller_exit, and envd logs client_cancel under the same request id.
	ctx, stop := cove.NotifyExit(context.Background())
	defer stop()

	sb, err := cove.NewClient(cove.Config{}).Create(ctx, cove.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	if _, err := sb.Commands.Run(ctx, "sleep 30"); errors.Is(err, cove.ErrCallerExit) {
		fmt.Println("interrupted")
	}
}

func ExampleFiles_Write() {
	ctx := context.Background()
	sb, err := cove.NewClient(cove.Config{}).Create(ctx, cove.SandboxOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	if _, err := sb.Files.Write(ctx, "/tmp/hello.txt", []byte("hello")); err != nil {
		log.Fatal(err)
	}
	b, err := sb.Files.Read(ctx, "/tmp/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
}

func ExampleClient_List() {
	ctx := context.Background()
	client := cove.NewClient(cove.Config{})
	for info, err := range client.List(ctx, cove.ListOptions{Metadata: map[string]string{"team": "ml"}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(info.SandboxID, info.State, info.EndAt)
	}
}

func ExampleRequestIDOf() {
	// Any error from the SDK carries the request id of the call that failed.
	err := fmt.Errorf("nightly job: %w", &cove.SandboxKilledError{
		SandboxID: "i1a2b3c", Reason: reason.KillTimeout, RequestID: "01m8vs03am5zrhpp4eb7",
	})
	var killed *cove.SandboxKilledError
	if errors.As(err, &killed) {
		fmt.Println(killed.Reason, errors.Is(err, cove.ErrNotFound), cove.RequestIDOf(err))
	}
	// Output: timeout true 01m8vs03am5zrhpp4eb7
}
