package e2e

import (
	"testing"

	"github.com/helm-locker/helm-locker/e2e/framework"
)

// env is the control plane and CLIs shared by every test in this binary.
var env *framework.Env

func TestMain(m *testing.M) {
	framework.Main(m, &env)
}
