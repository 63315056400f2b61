package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// gcPercent is the garbage collector's target unless GOGC is set. Most of
// the locker's heap is long-lived: a declaration per locked object, kept
// for as long as the lock. Go's default, 100, lets the heap grow to twice
// what is live before collecting, and the resident set follows the heap's
// peak; the locker, idle most of the time, makes garbage slowly, so a
// tighter target costs little CPU and saves a third of its memory.
//
// A target of 200 for the cold lock alone (bench -cold-lock-rounds, 400
// releases of 50 objects) cut its garbage collection by two thirds, but
// left the long-lived objects spread over more of the heap: 23 MiB more
// resident for good, a fifth, for a cold lock about a tenth faster in
// noisy runs. The per-object memory is the scarcer of the two.
const gcPercent = 50

// memoryLimitShare is the part of the container's memory limit the
// garbage collector keeps the heap under: the rest is for the runtime's
// own and for what is freed but not yet given back.
const memoryLimitShare = 0.9

// cgroupMemoryMax is where cgroup v2 shows the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// limitHeap bounds the heap by the container's memory limit, unless
// GOMEMLIMIT is set: near the limit, the garbage collector works harder
// rather than let the kernel kill the process for memory that was garbage.
// It returns the bound it set, or 0.
func limitHeap() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit, ok := memoryLimit(cgroupMemoryMax)
	if !ok {
		return 0
	}
	bound := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(bound)
	return bound
}

// memoryLimit reads a cgroup v2 memory.max file: a count of bytes, or
// "max" for none.
func memoryLimit(file string) (int64, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return limit, err == nil && limit > 0
}
