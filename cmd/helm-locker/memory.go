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
const gcPercent = 50

// startupGCPercent is the operator's target until its first syncs are
// done. The cold lock parses every manifest and checks every object once,
// garbage made in a minute or two; at gcPercent, collecting it took a
// third of the locker's CPU, on cores the API server needs for the same
// cold lock. The memory a larger target lets the heap reach goes back
// once the syncs are done (see controller.Config.Settled).
const startupGCPercent = 200

// memoryLimitShare is the part of the container's memory limit the
// garbage collector keeps the heap under, however large its target: the
// rest is for the runtime's own and for what is freed but not yet given
// back.
const memoryLimitShare = 0.9

// cgroupMemoryMax is where cgroup v2 shows the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// tuneStartupMemory raises the garbage collector's target for the cold
// lock unless GOGC is set, bounds the heap by the container's memory limit
// unless GOMEMLIMIT is set, and returns what brings the target back to
// gcPercent.
func tuneStartupMemory() (settled func()) {
	if os.Getenv("GOMEMLIMIT") == "" {
		if limit, ok := memoryLimit(cgroupMemoryMax); ok {
			debug.SetMemoryLimit(int64(float64(limit) * memoryLimitShare))
		}
	}
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	debug.SetGCPercent(startupGCPercent)
	return func() { debug.SetGCPercent(gcPercent) }
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
