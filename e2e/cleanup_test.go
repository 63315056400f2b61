package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv marks the copy of this test binary that TestKilledRunLeavesNoProcess
// starts and then kills.
const childEnv = "HELM_LOCKER_E2E_CHILD"

// TestKilledRunLeavesNoProcess starts this test binary again as a child,
// which starts its own control plane in TestMain, then SIGKILLs the child the
// way a CI timeout or a second Ctrl-C would. Its etcd, kube-apiserver and
// kube-controller-manager must die with it.
func TestKilledRunLeavesNoProcess(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestChildHoldsControlPlane$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	var dir string
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "child-control-plane "); ok {
			fields := strings.Fields(rest)
			dir = fields[0]
			for _, f := range fields[1:] {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("bad pid %q from child", f)
				}
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 3 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not report its control plane: pids %v, scan error %v", pids, scanner.Err())
	}
	defer os.RemoveAll(dir)
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("control plane process %d was not running before the kill", pid)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived its killed parent", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestChildHoldsControlPlane is the child half of
// TestKilledRunLeavesNoProcess; on its own it does nothing.
func TestChildHoldsControlPlane(t *testing.T) {
	t.Parallel()
	if os.Getenv(childEnv) == "" {
		t.Skip("run only as the child of TestKilledRunLeavesNoProcess")
	}
	fmt.Printf("child-control-plane %s %s\n", env.CP.Dir, strings.Trim(fmt.Sprint(env.CP.PIDs()), "[]"))
	select {} // wait to be killed
}

// alive reports whether pid is a running process, counting a zombie as
// dead: it has exited and only waits to be reaped.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
