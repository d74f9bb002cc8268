package cove_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	cove "github.com/cove-dev/cove/sdk"
)

// A volume of 256 MiB, filled through the content API, read by many sandboxes at once and
// written by one.
func ExampleClient_VolumeFiles() {
	ctx := context.Background()
	client := cove.NewClient(cove.Config{})
	vol, err := client.CreateVolumeWith(ctx, "datasets", cove.VolumeOptions{SizeMB: 256})
	if err != nil {
		log.Fatal(err)
	}
	files := client.VolumeFiles(vol.Name)
	if _, err := files.Write(ctx, "/in/data.csv", strings.NewReader("a,b\n1,2\n"), cove.VolumeWriteOptions{Force: true}); errors.Is(err, cove.ErrNoSpace) {
		log.Fatal("the volume is full: ", err)
	} else if err != nil {
		log.Fatal(err)
	}
	writer, err := client.Create(ctx, cove.SandboxOptions{VolumeMounts: []cove.VolumeMount{{Name: vol.Name, Path: "/data"}}})
	if err != nil {
		log.Fatal(err)
	}
	defer writer.Kill(ctx)
	reader, err := client.Create(ctx, cove.SandboxOptions{VolumeMounts: []cove.VolumeMount{{Name: vol.Name, Path: "/data", ReadOnly: true}}})
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Kill(ctx)
	if _, err := writer.Commands.Run(ctx, "wc -l < /data/in/data.csv > /data/out.txt"); err != nil {
		log.Fatal(err)
	}
	res, err := reader.Commands.Run(ctx, "cat /data/out.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout) // 2
}
