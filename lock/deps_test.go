package lock

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPure: the state machine knows no Helm and no CR types, so that every
// kind of lock can run on it.
func TestPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/helm-locker/helm-locker/lock").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, ".") && !strings.HasPrefix(dep, "github.com/helm-locker/helm-locker/lock") {
			t.Errorf("lock imports %s", dep)
		}
	}
}
