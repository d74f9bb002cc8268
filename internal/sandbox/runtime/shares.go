package runtime

import (
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
)

// kernelShares is the cpu.shares a cgroup v1 starts with: the weight of one task at nice 0.
const kernelShares = 1024

// weighParent gives the cgroup every sandbox's lives under (Config.CgroupParent) the CPU
// weight of one busy task per CPU, as Kubernetes gives its pods' parent the machine's
// allocatable CPUs. With the kernel's 1024 all sandboxes together weigh as much as one host
// task: with ten host tasks busy, a starting envd got a tenth of a CPU share and a create
// took 140 ms instead of 80 (its health wait 57 ms instead of 11). A value other than the
// kernel's is an operator's and stays.
func weighParent(parent string) error {
	dir := filepath.Join(cgroupRoot, "cpu", parent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "cpu.shares")
	cur, err := readUint(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // no cpu controller at cgroupRoot/cpu: nothing to weigh
		}
		return err
	}
	if cur != kernelShares {
		return nil
	}
	return os.WriteFile(file, []byte(strconv.Itoa(kernelShares*goruntime.NumCPU())), 0)
}
