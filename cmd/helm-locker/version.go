package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set by the Makefile through -ldflags -X, so a binary
// says which source it came from.
var (
	version = "dev"
	commit  = "unknown"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of helm-locker and the libraries it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}

// versionString names the build and the Helm and client-go versions linked
// in, because those decide which release encodings and API versions the
// locker understands.
func versionString() string {
	helm, clientGo := "unknown", "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			switch dep.Path {
			case "helm.sh/helm/v3":
				helm = dep.Version
			case "k8s.io/client-go":
				clientGo = dep.Version
			}
		}
	}
	return fmt.Sprintf("helm-locker %s (commit %s, %s, helm %s, client-go %s)", version, commit, runtime.Version(), helm, clientGo)
}
