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
