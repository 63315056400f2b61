package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/helm-locker/helm-locker/internal/sandbox"
)

// newRenderSandboxCommand is the hidden subcommand each render of a chart
// runs in (see internal/sandbox): the operator, and `diff --rerender`,
// start this executable with it, feed it the release over a pipe, answer
// its lookups, and kill it at its deadline.
func newRenderSandboxCommand() *cobra.Command {
	return &cobra.Command{
		Use:    sandbox.Subcommand,
		Short:  "Render one chart for the helm-locker that starts it (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return sandbox.RunChild(cmd.Context())
		},
	}
}

// bytesFlag is a flag of a size in bytes, written as Kubernetes writes
// quantities (256Mi, 1Gi), as a container's memory limit is.
type bytesFlag struct{ q resource.Quantity }

var _ pflag.Value = (*bytesFlag)(nil)

func newBytesFlag(bytes int64) *bytesFlag {
	return &bytesFlag{q: *resource.NewQuantity(bytes, resource.BinarySI)}
}

func (f *bytesFlag) String() string { return f.q.String() }

func (f *bytesFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("want a size such as 256Mi: %w", err)
	}
	f.q = q
	return nil
}

func (f *bytesFlag) Type() string { return "quantity" }

// bytes is the size in bytes.
func (f *bytesFlag) bytes() int64 { return f.q.Value() }
