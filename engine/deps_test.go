package engine

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayLean holds the promise to operators that import the
// engine and the manifest parser: neither pulls in Helm, the CLI and
// configuration libraries, Prometheus or the benchmark's plotting, nor any
// of the module's internal packages.
func TestImportsStayLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/helm-locker/helm-locker/engine", "github.com/helm-locker/helm-locker/manifest").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages; expected client-go's among them", len(deps))
	}
	forbidden := []string{"helm.sh/", "github.com/spf13/cobra", "github.com/spf13/viper", "github.com/prometheus/", "gonum.org/", "github.com/helm-locker/helm-locker/internal/", "github.com/helm-locker/helm-locker/api"}
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("engine or manifest imports %s", dep)
			}
		}
	}
}
