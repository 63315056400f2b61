package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "write docs/configuration.md from the flags")

// TestConfigurationReference holds docs/configuration.md to the flags the
// binary defines: a flag added, renamed or with a new default fails it.
func TestConfigurationReference(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	want := configReference(newRootCommand())
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/configuration.md is not what the flags say; run go test ./cmd/helm-locker -run TestConfigurationReference -update")
	}
	for _, name := range []string{"--namespace", "--webhook-bind-address", "--helm-operation-timeout", "HELM_LOCKER_CONTROLLER_NAME"} {
		if !strings.Contains(want, name) {
			t.Errorf("the reference lacks %s", name)
		}
	}
}

// configReference is docs/configuration.md: every flag of the operator,
// with its environment variable, default and meaning, as the binary
// defines them. A test holds the file to it, so it cannot fall behind.
func configReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Generated from the flags of `helm-locker` (run with no subcommand, it runs the operator); `go test ./cmd/helm-locker -run TestConfigurationReference -update` writes it again.\n\n")
	b.WriteString("Every flag can also be set in the environment, or in the file given with `--config` (YAML, JSON or TOML, keys named as the flags). A flag on the command line beats the environment, which beats the file.\n\n")
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	visit := func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		env := "`" + envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")) + "`"
		if f.Name == "config" {
			// The file is named on the command line only (see bindConfig).
			env = "—"
		}
		def := f.DefValue
		if def == "" || def == "[]" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, env, def, strings.ReplaceAll(f.Usage, "|", "\\|"))
	}
	root.PersistentFlags().VisitAll(visit)
	root.Flags().VisitAll(visit)
	return b.String()
}
