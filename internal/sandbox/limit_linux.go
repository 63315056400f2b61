package sandbox

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr makes the kernel kill a render's process when the thread
// that started it exits: Go's runtime does not retire threads that were
// not locked, so in practice when the locker dies, however it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// limitMemory caps the memory the process pid may map, as the kernel
// counts it for RLIMIT_DATA: its private writable mappings, which hold Go's
// heap and stacks, and not the address space Go's runtime only reserves
// (which RLIMIT_AS would count: a Go program reserves hundreds of MiB it
// never touches). The soft and hard limits are both set, so the process
// cannot raise its own. The parent sets it after the process started, and
// before it sends it anything to render.
func limitMemory(pid int, bytes int64) error {
	limit := &unix.Rlimit{Cur: uint64(bytes), Max: uint64(bytes)}
	return unix.Prlimit(pid, unix.RLIMIT_DATA, limit, nil)
}

// maxRSS is the peak resident set of an exited process, in bytes.
func maxRSS(state *os.ProcessState) int64 {
	if ru, ok := state.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10 // KiB on Linux
	}
	return 0
}

// killed says whether the process was killed by SIGKILL.
func killed(state *os.ProcessState) bool {
	ws, ok := state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
