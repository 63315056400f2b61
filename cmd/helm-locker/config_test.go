package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestBindConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("namespace: from-file\ncontroller-name: file-locker\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		config   string
		wantNS   string
		wantName string
	}{
		{name: "defaults", wantNS: "cattle-helm-system", wantName: "helm-locker"},
		{name: "file", config: file, wantNS: "from-file", wantName: "file-locker"},
		{name: "environment beats file", config: file, env: map[string]string{"HELM_LOCKER_NAMESPACE": "from-env"}, wantNS: "from-env", wantName: "file-locker"},
		{name: "flag beats environment", args: []string{"--namespace=from-flag"}, env: map[string]string{"HELM_LOCKER_NAMESPACE": "from-env", "HELM_LOCKER_CONTROLLER_NAME": "env-locker"}, wantNS: "from-flag", wantName: "env-locker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			ns := cmd.Flags().String("namespace", "cattle-helm-system", "")
			name := cmd.Flags().String("controller-name", "helm-locker", "")
			if err := cmd.Flags().Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if err := bindConfig(cmd, tt.config); err != nil {
				t.Fatal(err)
			}
			if *ns != tt.wantNS || *name != tt.wantName {
				t.Errorf("namespace=%q controller-name=%q, want %q %q", *ns, *name, tt.wantNS, tt.wantName)
			}
		})
	}
}

func TestBindConfigErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("workers: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{Use: "x"}
	cmd.Flags().Int("workers", 4, "")
	if err := bindConfig(cmd, bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad config file: error %v, want one naming %s", err, bad)
	}
	t.Setenv("HELM_LOCKER_WORKERS", "many")
	if err := bindConfig(cmd, ""); err == nil || !strings.Contains(err.Error(), "--workers") {
		t.Errorf("bad environment value: error %v, want one naming --workers", err)
	}
}
