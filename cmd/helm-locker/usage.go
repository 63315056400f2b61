package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// usageError is err, an error in how cmd was called, as the process
// exits with it: status 2, and a pointer to the command's help.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{exitUsage, fmt.Errorf("%w\nSee '%s --help' for usage.", err, cmd.CommandPath())}
}

// exitUsageOnBadCalls makes every error in how root or a command under it
// is called a usageError: unknown flags and bad flag values (cobra's flag
// error function, which subcommands inherit), and wrong arguments (each
// command's Args). Cobra returns both as plain errors, which would exit
// 1, the status diff gives "differs". Errors in flag values that only a
// RunE can check are returned as usageErrors there.
func exitUsageOnBadCalls(root *cobra.Command) {
	// Cobra adds the completion command only when it executes; added
	// now, it is walked below like any other.
	root.InitDefaultCompletionCmd()
	root.SetFlagErrorFunc(usageError)
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if args := cmd.Args; args != nil {
			cmd.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return usageError(cmd, err)
				}
				return nil
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
