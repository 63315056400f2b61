package main

import (
	"github.com/spf13/cobra"
)

// newRootCommand builds the command tree. Errors are printed once by main, so
// cobra's own printing is turned off.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "helm-locker",
		Short:         "Keep the objects of Helm releases exactly as their manifests declare",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand())
	return root
}
