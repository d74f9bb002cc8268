package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
)

func (b *bench) phaseDensity(ctx context.Context) error {
	n := b.cfg.idle
	fmt.Fprintf(os.Stderr, "density: %d idle sandboxes, settle %v ...\n", n, b.cfg.settle)
	avail0, err := memAvailable()
	if err != nil {
		return err
	}
	serverRSS0 := vmRSS(b.serverPid)
	var ids []string
	killAll := func() {
		for _, id := range ids {
			_ = b.kill(context.WithoutCancel(ctx), id)
		}
		ids = nil
	}
	defer killAll()
	for range n {
		id, err := b.create(ctx)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	measure.Sleep(ctx, b.cfg.settle)
	avail1, err := memAvailable()
	if err != nil {
		return err
	}
	serverRSS1 := vmRSS(b.serverPid)
	var usage, rss, cache, kmem, pss uint64
	procs := 0
	for _, id := range ids {
		for _, pid := range cgroupPids(filepath.Join(memcgRoot, id)) {
			if kv, err := readKV(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
				pss += kv["Pss:"] << 10
				procs++
			}
		}
		dir := filepath.Join(memcgRoot, id)
		u, err := readUint(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			return err
		}
		if k, err := readUint(filepath.Join(dir, "memory.kmem.usage_in_bytes")); err == nil {
			kmem += k
		}
		st, err := readKV(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return err
		}
		usage, rss, cache = usage+u, rss+st["total_rss"], cache+st["total_cache"]
	}
	per := func(total uint64) float64 { return float64(total) / float64(n) }
	perGiB := func(total uint64) float64 { return float64(1<<30) / per(total) }
	b.info("idle sandbox memcg usage, mean", mib(per(usage)), "MiB")
	b.info("idle sandbox memcg total_rss, mean", mib(per(rss)), "MiB")
	b.info("idle sandbox memcg total_cache, mean", mib(per(cache)), "MiB")
	b.info("idle sandbox memcg kmem usage, mean", mib(per(kmem)), "MiB")
	b.info(fmt.Sprintf("idle sandbox PSS of its processes, mean (%d procs)", procs), mib(per(pss)), "MiB")
	b.info("idle sandboxes per GiB (PSS)", perGiB(pss), "/GiB")
	if serverRSS1 > serverRSS0 {
		b.info("cove server RSS growth per idle sandbox", mib(per(serverRSS1-serverRSS0)), "MiB")
	}
	b.info("idle sandboxes per GiB (memcg usage)", perGiB(usage), "/GiB")
	b.info("idle sandboxes per GiB (RSS only)", perGiB(rss), "/GiB")
	if avail0 > avail1 {
		drop := avail0 - avail1
		b.info("host MemAvailable drop per sandbox (noisy on a shared host)", mib(per(drop)), "MiB")
		b.info("idle sandboxes per GiB (MemAvailable)", perGiB(drop), "/GiB")
	} else {
		b.info("host MemAvailable drop per sandbox (grew: noise)", -mib(float64(avail1-avail0)/float64(n)), "MiB")
	}
	killAll()
	measure.Sleep(ctx, time.Second)
	if avail2, err := memAvailable(); err == nil && avail2 > avail1 {
		b.info("host MemAvailable regained per sandbox killed", mib(per(avail2-avail1)), "MiB")
	}
	return nil
}

// vmRSS is a process's resident set in bytes, 0 if unknown.
func vmRSS(pid int) uint64 {
	kv, err := readKV(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return kv["VmRSS:"] << 10
}

func cgroupPids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func memAvailable() (uint64, error) {
	kv, err := readKV("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	v, ok := kv["MemAvailable:"]
	if !ok {
		return 0, errors.New("no MemAvailable in /proc/meminfo")
	}
	return v << 10, nil // kB
}

// readKV reads "key value [unit]" lines (memory.stat, /proc/meminfo).
func readKV(file string) (map[string]uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	kv := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			kv[f[0]] = v
		}
	}
	return kv, nil
}

func readUint(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func mib(b float64) float64 { return b / (1 << 20) }
