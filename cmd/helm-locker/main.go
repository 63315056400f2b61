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

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		code, print := exitCode(err)
		if print {
			fmt.Fprintln(os.Stderr, "Error:", err)
		}
		stop()
		os.Exit(code)
	}
}

// Exit statuses. diff's follow kubectl diff: 0 same, 1 differs, 2 it
// could not tell. A command called wrongly exits 2, whichever it is, so
// that a script running diff never takes a typo for "differs".
const (
	exitFailed     = 1
	exitDiffers    = 1
	exitDiffFailed = 2
	exitUsage      = 2
)

// exitError ends the process with code, printing err if it is not nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode is the status the process ends with for err, the error a
// command returned, and whether err is to be printed.
func exitCode(err error) (code int, print bool) {
	var exit *exitError
	if !errors.As(err, &exit) {
		return exitFailed, true
	}
	return exit.code, exit.err != nil
}
