package outage

import (
	"testing"

	"github.com/helm-locker/helm-locker/e2e/framework"
)

// env is this binary's own control plane and CLIs.
var env *framework.Env

func TestMain(m *testing.M) {
	framework.MainWith(m, &env, framework.Options{
		// ConfigMaps are watched straight from etcd, which compacts
		// every 2 s: a watch resumed from a resourceVersion older than
		// that gets a real 410 Gone.
		APIServerArgs:  []string{"--watch-cache-sizes=configmaps#0", "--etcd-compaction-interval=2s"},
		NoSharedLocker: true,
	})
}
