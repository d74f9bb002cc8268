// Command network measures what sandbox networking costs and delivers, and prints figures and
// ratios measured in one run. It never fails on a missed goal: it is a measuring tool.
//
//	go run ./bench/network             # about a minute
//	go run ./bench/network -creates 50 -mib 1024
//
// It needs root and the shared test templates ($COVE_TEST_TEMPLATES). Every packet stays on
// this machine: it builds a fake internet (internal/sandbox/network/nettest, 198.18.0.0/15) and its
// servers take a reserved 198.19.N.0/24 pool limited to that range. Phases:
//
//  1. attach: internal/sandbox/network's Attach, cold (namespace, veth, addresses, route, nft chain)
//     and from the ready pool;
//  2. create: create -> `true` finished through the SDK, on a server with --network=false and
//     on one with networking (ready namespaces on), and with -baseline on a third with an
//     older binary, the servers taking turns; p50 and p90 of each;
//  3. throughput: TCP bytes to the fake internet's sink, each path with the same tool on
//     both sides: Go from the host (the veth's line rate) and from a bare sandbox namespace
//     (veth, forward, NAT, veth), and dd writing to bash's /dev/tcp from the host and from
//     inside a sandbox (timed by dd, so the command's start is not in it).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	cove "github.com/cove-dev/cove/sdk"
)

func main() {
	creates := flag.Int("creates", 30, "timed creates per server (after warm-up runs)")
	attaches := flag.Int("attaches", 40, "timed attaches, cold and warm")
	mib := flag.Int("mib", 512, "MiB sent per throughput run")
	rounds := flag.Int("rounds", 9, "throughput rounds (each sender once a round, in turns)")
	coveBin := flag.String("cove", "", "cove binary (built from this checkout when empty)")
	baseline := flag.String("baseline", "", "another cove binary (an older build) whose server takes turns with the others in the create phase")
	flag.Parse()
	if err := run(*creates, *attaches, *mib, *rounds, *coveBin, *baseline); err != nil {
		fmt.Fprintln(os.Stderr, "bench/network:", err)
		os.Exit(1)
	}
}

func run(creates, attaches, mib, rounds int, bin, baseline string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, veths, nftables)")
	}
	tmp, err := os.MkdirTemp("", "cove-bench-network-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		if bin, err = covetest.BuildBinary(tmp); err != nil {
			return err
		}
	}
	in, err := nettest.Build()
	if err != nil {
		return fmt.Errorf("fake internet: %w", err)
	}
	defer in.Close()
	fmt.Printf("fake internet %s (host %s), every packet stays on this machine\n\n", in.Subnet, in.Addr)

	cold, warm, err := attachPhase(in, attaches, tmp)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	fmt.Printf("%-70s %8.2f ms\n", "attach, cold (netns+veth+addr+route+nft), p50", measure.Ms(cold))
	fmt.Printf("%-70s %8.2f ms\n", "attach, from the ready pool, p50", measure.Ms(warm))

	attach, favored, err := cgroupAttach(20)
	if err != nil {
		return fmt.Errorf("cgroup attach: %w", err)
	}
	fmt.Printf("%-70s %8.2f ms (favordynmods %v; 7 ms without it here)\n", "runc's first pid write into a new cgroup, p50", measure.Ms(attach), favored)

	servers := []server{{"networking off", bin, []string{"--network=false"}}, {"networking on", bin, []string{"--network-dns", in.DNS().String()}}}
	if baseline != "" {
		servers = append(servers, server{"networking on, -baseline binary", baseline, []string{"--network-dns", in.DNS().String()}})
	}
	times, err := createPhase(servers, tmp, creates)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	for i, s := range servers {
		goal := ""
		if i > 0 {
			goal = "  goal <= 50 ms"
		}
		fmt.Printf("%-70s %8.2f ms (p90 %.2f)%s\n", "create -> first command, "+s.name+", p50", measure.Ms(measure.Pct(times[i], 50)), measure.Ms(measure.Pct(times[i], 90)), goal)
	}
	fmt.Printf("%-70s %8.2f\n", "ratio on / off (p50)", float64(measure.Pct(times[1], 50))/float64(measure.Pct(times[0], 50)))
	if baseline != "" {
		fmt.Printf("%-70s %8.2f\n", "ratio on / on with the -baseline binary (p50)", float64(measure.Pct(times[1], 50))/float64(measure.Pct(times[2], 50)))
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu/cove/cpu.shares"); err == nil {
		fmt.Printf("%-70s %8s\n", "cpu.shares of the sandboxes' parent cgroup (cove server sets 1024 per CPU)", strings.TrimSpace(string(b)))
	}

	return throughputPhase(bin, in, tmp, mib, rounds)
}

// attachPhase times Attach with no ready namespaces and with them, and returns the p50s.
func attachPhase(in *nettest.Internet, n int, tmp string) (cold, warm time.Duration, err error) {
	for _, w := range []int{-1, 4} {
		pool, release, err := nettest.ReservePool()
		if err != nil {
			return 0, 0, err
		}
		m, err := network.New(context.Background(), network.Config{Pool: pool.Pool, Table: pool.Table, LinkPrefix: pool.LinkPrefix,
			LogGroup: pool.LogGroup, DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: w, StateDir: filepath.Join(tmp, pool.Table)})
		if err != nil {
			release()
			return 0, 0, err
		}
		ctx := context.Background()
		i := 0
		ds, err := measure.Runs(n, func() (time.Duration, error) {
			i++
			id := fmt.Sprint("bench-", i)
			t0 := time.Now()
			_, err := m.Attach(ctx, id, egress.Policy{AllowInternet: true})
			d := time.Since(t0)
			if err != nil {
				return 0, err
			}
			// Give the pool the moment a real create gives it (envd's start) to refill.
			if w > 0 {
				time.Sleep(20 * time.Millisecond)
			}
			return d, m.Detach(ctx, id)
		})
		cerr := m.Close(ctx)
		release()
		if err != nil {
			return 0, 0, err
		}
		if cerr != nil {
			return 0, 0, cerr
		}
		if w < 0 {
			cold = measure.Pct(ds, 50)
		} else {
			warm = measure.Pct(ds, 50)
		}
	}
	return cold, warm, nil
}

// server is one `cove server` the create phase times.
type server struct {
	name string
	bin  string
	args []string
}

// createPhase starts each server and times create -> `true` finished on each, the servers
// taking turns (one create each a round) so that all see the same load. It returns each
// server's timed runs, after a few warm-up rounds.
func createPhase(servers []server, tmp string, n int) ([][]time.Duration, error) {
	var clients []*cove.Client
	for i, s := range servers {
		data := filepath.Join(tmp, fmt.Sprint("server-", i))
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		p, err := covetest.LaunchWith(s.bin, data, filepath.Join(data, "server.log"), s.args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		defer p.Stop()
		clients = append(clients, cove.NewClient(cove.Config{APIURL: p.URL, APIKey: p.Key}))
	}
	ctx := context.Background()
	warm := max(n/10, 5)
	out := make([][]time.Duration, len(servers))
	for round := range warm + n {
		for i, c := range clients {
			t0 := time.Now()
			sb, err := c.Create(ctx, cove.SandboxOptions{})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", servers[i].name, err)
			}
			_, err = sb.Commands.Run(ctx, "true")
			d := time.Since(t0)
			if kerr := sb.Kill(ctx); err == nil {
				err = kerr
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", servers[i].name, err)
			}
			if round >= warm {
				out[i] = append(out[i], d)
			}
			// Let the ready pool refill between creates, as it does between real ones.
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out, nil
}

// throughputPhase sends mib MiB to the sink with Go from the host and from a bare sandbox
// namespace, and with dd from the host and from inside a real sandbox, in turns, rounds
// times, and prints the median rates and each sandbox path's share of the same tool's rate
// from the host (the veth's line rate, measured in the same run).
func throughputPhase(bin string, in *nettest.Internet, tmp string, mib, rounds int) error {
	sink := net.JoinHostPort(in.Addr.String(), "9000")
	size := int64(mib) << 20
	send := func(c net.Conn, err error) (float64, error) {
		if err != nil {
			return 0, err
		}
		defer c.Close()
		t0 := time.Now()
		if _, err := io.CopyBuffer(c, io.LimitReader(zeros{}, size), make([]byte, 256<<10)); err != nil {
			return 0, err
		}
		return float64(size) / (1 << 20) / time.Since(t0).Seconds(), nil
	}

	pool, release, err := nettest.ReservePool()
	if err != nil {
		return err
	}
	defer release()
	m, err := network.New(context.Background(), network.Config{Pool: pool.Pool, Table: pool.Table, LinkPrefix: pool.LinkPrefix,
		LogGroup: pool.LogGroup, DNS: []netip.AddrPort{}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1, StateDir: filepath.Join(tmp, "tput")})
	if err != nil {
		return err
	}
	defer m.Close(context.Background())
	att, err := m.Attach(context.Background(), "tput", egress.Policy{AllowInternet: true})
	if err != nil {
		return err
	}
	defer m.Detach(context.Background(), "tput")

	data := filepath.Join(tmp, "tput-server")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	p, err := covetest.LaunchWith(bin, data, filepath.Join(data, "server.log"))
	if err != nil {
		return err
	}
	defer p.Stop()
	c := cove.NewClient(cove.Config{APIURL: p.URL, APIKey: p.Key})
	sb, err := c.Create(context.Background(), cove.SandboxOptions{})
	if err != nil {
		return err
	}
	defer sb.Kill(context.Background())
	// The same tool on both sides: dd writing to bash's /dev/tcp, timed by dd itself (so the
	// command's start through envd is not in the figure).
	script := fmt.Sprintf("LC_ALL=C dd if=/dev/zero bs=1M count=%d > /dev/tcp/%s/9000", mib, in.Addr)

	senders := []struct {
		name string
		one  func() (float64, error)
	}{
		{"TCP host -> test host, Go (veth line rate)", func() (float64, error) { return send(net.Dial("tcp", sink)) }},
		{"TCP sandbox netns -> test host, Go, via forward+NAT", func() (float64, error) {
			return send(nettest.DialIn(context.Background(), att.Netns, "tcp", sink))
		}},
		{"TCP host -> test host, dd to bash /dev/tcp", func() (float64, error) {
			out, err := exec.Command("bash", "-c", script).CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("%w: %s", err, out)
			}
			return ddRate(string(out))
		}},
		{"TCP inside a sandbox -> test host, dd to bash /dev/tcp", func() (float64, error) {
			r, err := sb.Commands.Run(context.Background(), "bash -c '"+script+"'")
			if err != nil {
				return 0, err
			}
			return ddRate(r.Stderr)
		}},
	}
	rates := make([][]float64, len(senders))
	for range rounds {
		for i, s := range senders {
			r, err := s.one()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			rates[i] = append(rates[i], r)
		}
	}
	median := func(rs []float64) float64 { rs = slices.Clone(rs); slices.Sort(rs); return rs[len(rs)/2] }
	// A share is the median of each round's own ratio: the two runs of a round are back to
	// back, so a neighbour's load that comes and goes between rounds moves both alike.
	share := func(of, base int) float64 {
		var rs []float64
		for r := range rates[of] {
			rs = append(rs, rates[of][r]/rates[base][r])
		}
		return 100 * median(rs)
	}
	for i, s := range senders {
		suffix := ""
		switch i {
		case 1:
			suffix = fmt.Sprintf("  %.0f%% of the Go line rate", share(1, 0))
		case 3:
			suffix = fmt.Sprintf("  %.0f%% of dd on the host, goal >= 80%%", share(3, 2))
		}
		fmt.Printf("%-70s %8.0f MiB/s%s\n", fmt.Sprintf("%s, median of %d", s.name, rounds), median(rates[i]), suffix)
	}
	return nil
}

// ddRate reads the rate from dd's closing statistics line ("268435456 bytes (268 MB,
// 256 MiB) copied, 0.2 s, 1.3 GB/s").
func ddRate(out string) (float64, error) {
	m := ddStats.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no statistics line in dd's output: %q", out)
	}
	bytes, _ := strconv.ParseFloat(m[1], 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	if secs <= 0 {
		return 0, fmt.Errorf("dd took no time: %q", out)
	}
	return bytes / (1 << 20) / secs, nil
}

var ddStats = regexp.MustCompile(`(\d+) bytes .*copied, ([0-9.e-]+) s`)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
