package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/helm-locker/helm-locker/manifest"
)

// helmFlagUsage is the --helm flag's help, the same for every command
// that reads files.
const helmFlagUsage = `read the files as this Helm applies a chart's rendered manifest: 4 (the
default, and what kubectl apply -f reads) keeps the blank lines a "|+" block
keeps at the end of a document; 3 trims each document first, as Helm 3 does`

// helmFlag is --helm: the Helm whose reading of a manifest the files are
// held to. Files are most often what a user's helm CLI rendered, and the
// CLI most users run now is Helm 4, so that is the default.
type helmFlag struct{ h manifest.Helm }

var _ pflag.Value = (*helmFlag)(nil)

func newHelmFlag() *helmFlag { return &helmFlag{h: manifest.Helm4} }

func (f *helmFlag) String() string { return fmt.Sprint(int(f.h)) }

func (f *helmFlag) Set(s string) error {
	switch s {
	case "3":
		f.h = manifest.Helm3
	case "4":
		f.h = manifest.Helm4
	default:
		return fmt.Errorf("want 3 or 4")
	}
	return nil
}

func (f *helmFlag) Type() string { return "3|4" }

// add registers the flag on flags.
func (f *helmFlag) add(flags *pflag.FlagSet) { flags.Var(f, "helm", helmFlagUsage) }
