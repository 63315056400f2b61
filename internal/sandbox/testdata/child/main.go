// Command child is a sandbox's child, built without the race detector for
// the package's tests that run with it: ThreadSanitizer maps more memory
// than a render's cap lets a process map, so a child built with it could
// not start.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/helm-locker/helm-locker/internal/sandbox"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != sandbox.Subcommand {
		fmt.Fprintln(os.Stderr, "usage: child", sandbox.Subcommand)
		os.Exit(2)
	}
	if err := sandbox.RunChild(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
