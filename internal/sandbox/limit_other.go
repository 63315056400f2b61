//go:build !linux

package sandbox

import (
	"os"
	"syscall"
)

// Elsewhere than Linux, which runs the locker, a render (of `diff
// --rerender`) has its deadline and Go's memory limit, but no cap the
// kernel enforces.

func sysProcAttr() *syscall.SysProcAttr { return nil }

func limitMemory(int, int64) error { return nil }

func maxRSS(*os.ProcessState) int64 { return 0 }

func killed(*os.ProcessState) bool { return false }
