package upgrade

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyUpgradeImportsHelmClients holds what useHelmFieldManager relies
// on: Helm's field manager is a package variable of Helm's pkg/kube, and
// this package is the only one of the module that imports it. Another
// package writing through Helm's kube client would write as "helm" once an
// upgrade has run. (Helm's pkg/action drives that client too; the module
// imports it elsewhere for GetVersionSet, which only reads discovery.)
func TestOnlyUpgradeImportsHelmClients(t *testing.T) {
	const self = "github.com/helm-locker/helm-locker/internal/upgrade"
	out, err := exec.Command("go", "list", "-e", "-f",
		"{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}",
		"github.com/helm-locker/helm-locker/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	clients := map[string]bool{"helm.sh/helm/v3/pkg/kube": true, "helm.sh/helm/v4/pkg/kube": true}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list listed %d packages; expected the module's", len(lines))
	}
	found := false
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg := fields[0]
		for _, imp := range fields[1:] {
			switch {
			case !clients[imp]:
			case pkg == self:
				found = true
			default:
				t.Errorf("%s imports %s; only %s may write through Helm's clients", pkg, imp, self)
			}
		}
	}
	if !found {
		t.Errorf("go list shows no import of Helm's clients by %s; the test no longer sees what it checks", self)
	}
}
