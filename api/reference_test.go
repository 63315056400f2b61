package api

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "write docs/api-reference.md from the Go types")

// TestAPIReference holds docs/api-reference.md to the Go types: a field
// added, renamed or documented anew without `make api-reference` fails it.
// It runs crd-ref-docs, pinned in hack/api-reference/tools.mod: about a
// second once the build cache holds the tool, and some 50 seconds on two
// cores from empty module and build caches, which the Go module proxy
// fills.
func TestAPIReference(t *testing.T) {
	root := ".."
	path := filepath.Join(root, "docs", "api-reference.md")
	out := filepath.Join(t.TempDir(), "api-reference.md")
	cmd := exec.Command("go", "tool", "-modfile=hack/api-reference/tools.mod", "crd-ref-docs",
		"--config=hack/api-reference/config.yaml",
		"--source-path=api",
		"--renderer=markdown",
		"--output-path="+out,
		"--log-level=ERROR",
	)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crd-ref-docs: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n"))
		t.Errorf("docs/api-reference.md is not what the Go types under api/ say; run make api-reference (-want +got):\n%s", diff)
	}
	for _, s := range []string{"helm.cattle.io/v1alpha1", "helm-locker.io/v1alpha1", "#### HelmReleaseSpec", "#### ManifestLockSpec", "`serviceAccountName`"} {
		if !strings.Contains(string(want), s) {
			t.Errorf("the reference lacks %s", s)
		}
	}
}
