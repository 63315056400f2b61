package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// ShardLabel is the label Flux shards sources by: a source-controller a
// test starts for shard X reconciles only the sources labelled X, and one
// started for no shard only those without the label (see
// StartSourceController).
const ShardLabel = "sharding.fluxcd.io/key"

// StartSourceController runs Flux's source-controller against the control
// plane until the test ends: its artifacts stored in a folder of the test
// binary's, and served on a loopback port, as in a cluster its Service
// serves them. It reconciles the sources of shard (labelled ShardLabel:
// shard), or with shard "" every source without the label, so that tests
// that run at once each have their own, as Flux's sharding does. Flux's
// CRDs must be installed first.
func (e *Env) StartSourceController(t testing.TB, shard string) *controlplane.Process {
	t.Helper()
	storage := FreeAddress(t)
	dir := filepath.Join(e.CP.Dir, "source-controller-"+fmt.Sprint(time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcessEnv("source-controller", e.Tools.SourceController, []string{
		"--storage-path=" + dir, "--storage-addr=" + storage, "--storage-adv-addr=" + storage,
		"--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", "--enable-leader-election=false",
		"--log-level=debug", "--watch-label-selector=" + shardSelector(shard),
	}, []string{"KUBECONFIG=" + e.CP.Kubeconfig, "RUNTIME_NAMESPACE=default"}, filepath.Join(dir, "source-controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			log, _ := os.ReadFile(p.Log)
			t.Logf("source-controller's log:\n%s", tail(string(log), 40))
		}
	})
	return p
}

// shardSelector selects the sources of shard.
func shardSelector(shard string) string {
	if shard == "" {
		return "!" + ShardLabel
	}
	return ShardLabel + "=" + shard
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// SharedArtifactMaxFiles is the shared locker's --artifact-max-files: an
// artifact of more files is past its caps, without a test making one of
// 100 MiB.
const SharedArtifactMaxFiles = 200
