package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set by the Makefile through -ldflags -X, so a binary
// says which source it came from; the image's labels and the chart's
// appVersion carry the same two.
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

// versionString names the build and the Helm SDKs and client-go linked in,
// because those decide which release encodings, engines and API versions
// the locker understands: each revision is read and rendered with the SDK
// of the Helm that wrote it.
func versionString() string {
	deps := map[string]string{"helm.sh/helm/v3": "unknown", "helm.sh/helm/v4": "unknown", "k8s.io/client-go": "unknown"}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if _, ok := deps[dep.Path]; ok {
				deps[dep.Path] = dep.Version
			}
		}
	}
	return fmt.Sprintf("helm-locker %s (commit %s, %s, helm SDKs %s and %s, client-go %s)", version, commit, runtime.Version(),
		deps["helm.sh/helm/v3"], deps["helm.sh/helm/v4"], deps["k8s.io/client-go"])
}
