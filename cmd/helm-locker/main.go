// Command helm-locker keeps the objects of locked Helm releases as their
// manifests declare them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// gcPercent is the garbage collector's target unless GOGC is set. Most of
// the locker's heap is long-lived: a declaration per locked object, kept
// for as long as the lock. Go's default, 100, lets the heap grow to twice
// what is live before collecting, and the resident set follows the heap's
// peak; the locker, idle most of the time, makes garbage slowly, so a
// tighter target costs little CPU and saves a third of its memory.
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		code := 1
		var exit *exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
		if exit == nil || exit.err != nil {
			fmt.Fprintln(os.Stderr, "Error:", err)
		}
		stop()
		os.Exit(code)
	}
}
