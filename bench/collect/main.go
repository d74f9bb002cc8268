// Command collect measures what output collection costs a client's stdout stream: it runs
// the same commands through a `cove envd --collect on` (its record stream going to a file,
// as a host writes it) and a `cove envd --collect off`, alternating, in one run, and prints
// the rate with collection on as a ratio of the rate with it off (target: at least 0.90),
// the bytes of records each workload wrote, and the CPU each envd spent per GiB streamed (a
// figure a loaded machine disturbs less than a rate). It never fails on a missed target.
//
// The ratio is the median of each round's own on/off ratio: the two runs of a round are
// back to back, so a neighbour's load that comes and goes between rounds moves both alike.
// A workload smaller than 1 GiB gets more rounds (1 GiB / its size / 2 times -rounds, so
// 64 MiB of 1 MiB lines, about 0.1 s a run, gets 8 times as many): a single short run on a
// shared machine read anywhere from 0.58 to 1.37.
//
//	go run ./bench/collect                 # 1 GiB binary, 256 MiB text lines, 64 MiB of 1 MiB lines
//	go run ./bench/collect -scale 0.25     # a quarter of each
//	go run ./bench/collect -cove /path/to/an/older/cove   # the same figures for another build
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/bench/internal/measure"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

func main() {
	cove := flag.String("cove", "", "cove binary to run (default: go build ./cmd/cove into a temp dir)")
	scale := flag.Float64("scale", 1, "fraction of the full sizes to stream")
	rounds := flag.Int("rounds", 7, "runs of each workload each way (more for small workloads); the median ratio counts")
	flag.Parse()
	if err := run(*cove, *scale, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench/collect:", err)
		os.Exit(1)
	}
}

type workload struct {
	name   string
	bytes  int64
	script string // bash; %d is the byte count
}

type envd struct {
	pid     int
	client  processconnect.ProcessClient
	records string // the record stream's file, "" with collection off
	stop    func()
}

func run(cove string, scale float64, rounds int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-collect-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cove == "" {
		cove = filepath.Join(dir, "cove")
		fmt.Fprintln(os.Stderr, "building cove ...")
		build := exec.Command("go", "build", "-o", cove, "github.com/cove-dev/cove/cmd/cove")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build cove: %w", err)
		}
	}
	on, err := startEnvd(ctx, cove, filepath.Join(dir, "records.jsonl"))
	if err != nil {
		return err
	}
	defer on.stop()
	off, err := startEnvd(ctx, cove, "")
	if err != nil {
		return err
	}
	defer off.stop()

	sized := func(n int64) int64 { return max(1<<20, int64(float64(n)*scale)) }
	loads := []workload{
		{"binary (head -c /dev/zero)", sized(1 << 30), `head -c %d /dev/zero`},
		{"short text lines", sized(256 << 20), `yes 'a short line of text, as a build log writes it' | head -c %d`},
		{"1 MiB-long lines", sized(64 << 20), `l=$(head -c 1048575 /dev/zero | tr '\0' a); while :; do printf '%%s\n' "$l"; done | head -c %d`},
	}
	fmt.Printf("%-28s %10s %7s %12s %12s %8s %14s %22s\n", "workload", "size", "rounds", "off MiB/s", "on MiB/s", "on/off", "records", "envd CPU off/on ms/GiB")
	for _, w := range loads {
		var rOn, rOff, cOn, cOff, ratios []float64
		var recBytes int64
		n := roundsFor(rounds, w.bytes)
		for i := range n {
			var a, ac, b, bc float64
			// Off first in even rounds, on first in odd ones: a load that rises or falls
			// during the run favours neither side.
			for _, side := range [][2]bool{{false, true}, {true, false}}[i%2] {
				if !side {
					if b, bc, err = rate(ctx, off, w); err != nil {
						return err
					}
					continue
				}
				before := fileSize(on.records)
				if a, ac, err = rate(ctx, on, w); err != nil {
					return err
				}
				recBytes = fileSize(on.records) - before
			}
			rOn, rOff, cOn, cOff = append(rOn, a), append(rOff, b), append(cOn, ac), append(cOff, bc)
			ratios = append(ratios, a/b)
		}
		perGiB := func(cpu []float64) float64 { return median(cpu) / (float64(w.bytes) / (1 << 30)) }
		fmt.Printf("%-28s %7.0f MiB %7d %12.0f %12.0f %8.2f %10.1f MiB %10.0f / %-10.0f\n", w.name, float64(w.bytes)/(1<<20), n, median(rOff), median(rOn), median(ratios),
			float64(recBytes)/(1<<20), perGiB(cOff), perGiB(cOn))
	}
	fmt.Println("on/off: the median of each round's ratio; target >= 0.90 for each workload")
	return nil
}

// roundsFor is the rounds a workload of size bytes gets: rounds for 1 GiB or more, and
// proportionally more below 512 MiB, so that every workload streams for a similar time.
func roundsFor(rounds int, size int64) int {
	return rounds * int(max(1, (1<<30)/size/2))
}

func startEnvd(ctx context.Context, cove, records string) (*envd, error) {
	addr, err := measure.FreeAddr()
	if err != nil {
		return nil, err
	}
	collect := "off"
	if records != "" {
		collect = "on"
	}
	cmd := exec.Command(cove, "envd", "--addr", addr, "--log-level", "warn", "--subreaper", "--collect", collect)
	cmd.Stderr = os.Stderr
	if records != "" {
		f, err := os.Create(records)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd.Stdout = f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start envd: %w", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	hc := &http.Client{Transport: &http.Transport{Protocols: protocols(), DisableCompression: true}}
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := hc.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 300 {
				break
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("envd on %s not healthy: %v", addr, err)
		}
		measure.Sleep(ctx, 50*time.Millisecond)
	}
	return &envd{pid: cmd.Process.Pid, client: processconnect.NewProcessClient(hc, base), records: records, stop: stop}, nil
}

func protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return p
}

// rate streams one workload through e and returns the client's stdout rate in MiB/s and the
// CPU envd spent (its own, not its children's) in milliseconds.
func rate(ctx context.Context, e *envd, w workload) (float64, float64, error) {
	noStdin := false
	cpu0, err := measure.CPUTicks(e.pid)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	stream, err := e.client.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", fmt.Sprintf(w.script, w.bytes)}},
		Stdin:   &noStdin,
	}))
	if err != nil {
		return 0, 0, err
	}
	defer stream.Close()
	var got int64
	ended := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		got += int64(len(ev.GetData().GetStdout()))
		ended = ended || ev.GetEnd() != nil
	}
	took := time.Since(t0)
	if err := stream.Err(); err != nil {
		return 0, 0, err
	}
	if !ended || got != w.bytes {
		return 0, 0, errors.New(fmt.Sprint(w.name, ": ", got, " of ", w.bytes, " bytes, ended ", ended))
	}
	cpu1, err := measure.CPUTicks(e.pid)
	if err != nil {
		return 0, 0, err
	}
	return float64(got) / (1 << 20) / took.Seconds(), float64(cpu1-cpu0) * 1000 / clockTicks, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
