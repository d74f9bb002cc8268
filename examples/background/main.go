// Command background shows that a command is not its stream: it starts a loop in the
// background, disconnects after the first line (the loop keeps running), connects again
// by pid, reads the rest and the exit code.
//
//	COVE_API_URL=http://127.0.0.1:3000 COVE_API_KEY=... go run ./examples/background
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

func main() {
	ctx := context.Background()
	sb, err := cove.NewClient(cove.Config{}).Create(ctx, cove.SandboxOptions{Timeout: 5 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Kill(ctx)

	first := make(chan string, 1)
	h, err := sb.Commands.Start(ctx, "for i in 1 2 3 4 5; do echo $i; sleep 0.2; done",
		cove.OnStdout(func(s string) {
			select {
			case first <- s:
			default:
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("started pid %d, first line: %s\n", h.PID(), strings.TrimSpace(<-first))
	h.Disconnect() // logs cancel.cause=disconnect; the loop keeps running
	fmt.Println("disconnected")

	again, err := sb.Commands.Connect(ctx, h.PID(), cove.OnStdout(func(s string) {
		for _, line := range strings.Fields(s) {
			fmt.Println("after reconnect:", line)
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	res, err := again.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit code %d\n", res.ExitCode)
}
