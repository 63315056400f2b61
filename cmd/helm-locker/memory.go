package main

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/internal/resident"
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

// The locker drops the executable's pages it touched (see resident.Trim)
// each time it goes quiet after work: once started and synced, after a
// cold lock, after a burst of drift. What it runs while quiet, and what
// runs again, is mapped back on its next touch.
const (
	// trimPoll is how often the process's CPU time is read.
	trimPoll = time.Second
	// trimQuietCPU is the most CPU time a poll may see for the process
	// to count as quiet: 2% of a core.
	trimQuietCPU = 20 * time.Millisecond
	// trimQuietPolls is how many quiet polls in a row make it quiet.
	trimQuietPolls = 2
	// trimAfterCPU is the CPU time worth a trim: less since the last one
	// touched little that a trim would drop, and a locker busy on and
	// off trims at most once for each of them, a few milliseconds of
	// faults against a quarter of a second of work.
	trimAfterCPU = 250 * time.Millisecond
)

// trimResident hands memory back (see handBack) each time the process
// goes quiet after work, until ctx is done. In a locker holding 1,000
// objects the executable's pages were half of its RSS.
func trimResident(ctx context.Context) {
	logger := klog.FromContext(ctx)
	poll := time.NewTicker(trimPoll)
	defer poll.Stop()
	var t trimmer
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
		cpu, err := processCPU()
		if err != nil || !t.observe(cpu) {
			continue
		}
		trimmed, err := handBack()
		if err != nil {
			logger.Error(err, "Could not drop the executable's pages from the resident set")
			return
		}
		if cpu, err := processCPU(); err == nil {
			t.after(cpu)
		}
		logger.V(4).Info("Dropped the executable's pages from the resident set", "bytes", trimmed)
	}
}

// handBack gives the kernel back what the process holds and no longer
// uses: the heap its work freed, and the executable's pages (see
// resident.Trim). The runtime returns freed heap on its own over minutes,
// and until then it counts in the resident set a container's limit is
// measured by: at 100,000 locked objects, 35 MiB of it after the cold
// lock had gone quiet. Handing it back forces a collection, a fraction of
// the work before it (trimAfterCPU).
func handBack() (int64, error) {
	debug.FreeOSMemory()
	return resident.Trim()
}

// trimmer decides when to trim from the process's CPU time, read once a
// trimPoll.
type trimmer struct {
	// last is the CPU time at the last poll, and trimmed at the last
	// trim (zero: the process start).
	last, trimmed time.Duration
	// quiet counts the quiet polls in a row.
	quiet int
}

// observe takes the process's CPU time now, and says whether to trim.
func (t *trimmer) observe(cpu time.Duration) bool {
	if cpu-t.last <= trimQuietCPU {
		t.quiet++
	} else {
		t.quiet = 0
	}
	t.last = cpu
	if t.quiet < trimQuietPolls || cpu-t.trimmed < trimAfterCPU {
		return false
	}
	t.trimmed = cpu
	return true
}

// after takes the process's CPU time once a trim is done: the trim's own
// work (a collection of the whole heap, at 100,000 locked objects a tenth
// of a second or more) is not work that makes another worth it.
func (t *trimmer) after(cpu time.Duration) {
	t.last, t.trimmed = cpu, cpu
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() (time.Duration, error) {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0, err
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()), nil
}
