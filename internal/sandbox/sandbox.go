package sandbox

import (
	"fmt"
	"time"

	"github.com/helm-locker/helm-locker/internal/render"
)

// Defaults of Options.
const (
	// DefaultTimeout is how long a render may run: a chart rendered
	// again renders in well under a second.
	DefaultTimeout = 10 * time.Second
	// DefaultMemoryLimit is the memory a render's process may map. The
	// locker's executable maps about 130 MiB as it starts (Go's first
	// heap arena, its threads' stacks), 9 MiB of it resident; a
	// manifest of 12 MiB still renders in what is left.
	DefaultMemoryLimit = 256 << 20
	// MinMemoryLimit is the least a render's process starts with.
	MinMemoryLimit = 64 << 20
)

// Options say how a Renderer runs each render.
type Options struct {
	// Timeout is how long a render may run, lookups included, before its
	// process is killed.
	Timeout time.Duration
	// MemoryLimit caps the memory a render's process may map, in bytes:
	// the kernel refuses it more (RLIMIT_DATA), and Go's runtime, which
	// keeps its heap under three quarters of it (GOMEMLIMIT), fails.
	MemoryLimit int64
	// Command starts the child: a program and its arguments, which calls
	// RunChild. Empty is this process's own executable with Subcommand,
	// which cmd/helm-locker and this package's tests run RunChild for.
	Command []string
}

// DefaultOptions are the options of a locker's renders, and of `diff
// --rerender`'s.
func DefaultOptions() Options {
	return Options{Timeout: DefaultTimeout, MemoryLimit: DefaultMemoryLimit}
}

// Validate says what is wrong with o, if anything.
func (o Options) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("a render's timeout of %s: want more than 0", o.Timeout)
	}
	if o.MemoryLimit < MinMemoryLimit {
		return fmt.Errorf("a render's memory limit of %d bytes: want at least %d MiB, which its process needs to start", o.MemoryLimit, MinMemoryLimit>>20)
	}
	return nil
}

// TimeoutError says a render ran past its deadline and was stopped.
type TimeoutError struct {
	Timeout time.Duration
	// Lookups are what the render looked up before it was stopped: a
	// change of one may be what lets it render again.
	Lookups []render.Lookup
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the render ran longer than %s and was stopped", e.Timeout)
}

// TooLargeError says a render was stopped for its size: its process ran
// into its memory cap (the kernel refused it memory, or its OOM killer
// killed it), or it sent back more than the parent reads.
type TooLargeError struct {
	// Limit is the cap it ran into, in bytes.
	Limit int64
	// Output says the cap was on what it sent back (a manifest, a
	// lookup), not on its memory.
	Output bool
	// Detail is what the process printed as it failed, if anything.
	Detail string
	// Lookups are what the render looked up before it was stopped.
	Lookups []render.Lookup
}

func (e *TooLargeError) Error() string {
	if e.Output {
		return fmt.Sprintf("the render sent back more than %d MiB and was stopped", e.Limit>>20)
	}
	msg := fmt.Sprintf("the render took more than its %d MiB of memory and was stopped", e.Limit>>20)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

// ProcessError says a render's process failed for a reason of its own: it
// could not start, or it exited without saying how the render ended.
type ProcessError struct {
	// State is how it ended, as os.ProcessState says; "" if it did not
	// start.
	State string
	// Output is what it printed, cut short.
	Output string
	Err    error
}

func (e *ProcessError) Error() string {
	msg := "the render's process failed"
	if e.State != "" {
		msg += " (" + e.State + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Output != "" {
		msg += ": " + e.Output
	}
	return msg
}

func (e *ProcessError) Unwrap() error { return e.Err }
