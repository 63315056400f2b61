package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/manifest"
)

func TestPrintDiffs(t *testing.T) {
	diffs := []engine.ObjectDiff{
		{Ref: engine.ObjectRef{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "apps", Name: "a"}, Kind: "ConfigMap",
			Paths: []string{"/data/key"}, Managers: []engine.Manager{{Name: "kubectl-edit", Operation: "Update"}},
			Text: "--- a (live)\n+++ a (declared)\n@@ -1 +1 @@\n-  key: edited\n+  key: declared\n"},
		{Ref: engine.ObjectRef{GVR: schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, Name: "r"}, Kind: "ClusterRole",
			Missing: true, Text: "+kind: ClusterRole\n"},
	}
	tests := []struct {
		colored bool
		want    string
	}{
		{false, `# ConfigMap apps/a: differs at /data/key; changed by kubectl-edit (Update)
--- a (live)
+++ a (declared)
@@ -1 +1 @@
-  key: edited
+  key: declared
# ClusterRole r: does not exist
+kind: ClusterRole
`},
		{true, "\x1b[1m# ConfigMap apps/a: differs at /data/key; changed by kubectl-edit (Update)\x1b[0m\n" +
			"\x1b[1m--- a (live)\x1b[0m\n\x1b[1m+++ a (declared)\x1b[0m\n\x1b[36m@@ -1 +1 @@\x1b[0m\n" +
			"\x1b[31m-  key: edited\x1b[0m\n\x1b[32m+  key: declared\x1b[0m\n" +
			"\x1b[1m# ClusterRole r: does not exist\x1b[0m\n\x1b[32m+kind: ClusterRole\x1b[0m\n"},
	}
	for _, tt := range tests {
		var b strings.Builder
		printDiffs(&b, lockDiffs(diffs), tt.colored)
		if diff := cmp.Diff(tt.want, b.String()); diff != "" {
			t.Errorf("colored=%v (-want +got):\n%s", tt.colored, diff)
		}
	}
}

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"b.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
		"a.json":    `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}`,
		"c.txt":     "ignored",
		"sub/d.yml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := readFiles([]string{dir, "-", filepath.Join(dir, "sub", "d.yml")}, strings.NewReader("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"), manifest.Helm4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	// A folder's files in name order, not its subfolders; then stdin.
	if diff := cmp.Diff([]string{"ConfigMap/a", "ConfigMap/b", "Secret/s", "ConfigMap/d"}, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if _, err := readFiles([]string{filepath.Join(dir, "c.txt")}, nil, manifest.Helm4); err == nil || !strings.Contains(err.Error(), "c.txt: document 1") {
		t.Errorf("reading a file that is no manifest = %v", err)
	}
}

// TestReadFilesAsHelm reads harbor's config, a "|+" block that ends in a
// blank line, last in its document, as each Helm would apply it: Helm 4
// (the default) keeps the blank line, Helm 3 trims it.
func TestReadFilesAsHelm(t *testing.T) {
	const harbor = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: jobservice}\ndata:\n  config.yml: |+\n    port: 8080\n\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
	for _, tt := range []struct {
		flag string
		want string
	}{
		{"", "port: 8080\n\n"},
		{"4", "port: 8080\n\n"},
		{"3", "port: 8080\n"},
	} {
		cmd := newLockCommand()
		if tt.flag != "" {
			if err := cmd.Flags().Set("helm", tt.flag); err != nil {
				t.Fatal(err)
			}
		}
		h := cmd.Flags().Lookup("helm").Value.(*helmFlag).h
		objs, err := readFiles([]string{"-"}, strings.NewReader(harbor), h)
		if err != nil {
			t.Fatal(err)
		}
		if got := objs[0].Object["data"].(map[string]any)["config.yml"]; got != tt.want {
			t.Errorf("--helm %q: config.yml = %q, want %q", tt.flag, got, tt.want)
		}
	}
}

func TestLockName(t *testing.T) {
	for file, want := range map[string]string{
		"app.yaml":             "app",
		"deploy/Web_App.yml":   "web-app",
		"overlays/prod/":       "prod",
		"-":                    "",
		"./manifests/all.json": "all",
	} {
		if got := lockName(file); got != want {
			t.Errorf("lockName(%q) = %q, want %q", file, got, want)
		}
	}
}
