package framework

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// StartSourceController runs Flux's source-controller against the control
// plane until the test ends: its artifacts stored in a folder of the test
// binary's, and served on a loopback port, as in a cluster its Service
// serves them. Flux's CRDs must be installed first.
func (e *Env) StartSourceController(t testing.TB) *controlplane.Process {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	storage := ln.Addr().String()
	_ = ln.Close()
	dir := filepath.Join(e.CP.Dir, "source-controller-"+fmt.Sprint(time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := controlplane.StartProcessEnv("source-controller", e.Tools.SourceController, []string{
		"--storage-path=" + dir, "--storage-addr=" + storage, "--storage-adv-addr=" + storage,
		"--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", "--enable-leader-election=false",
		"--log-level=debug",
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

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// SharedArtifactMaxFiles is the shared locker's --artifact-max-files: an
// artifact of more files is past its caps, without a test making one of
// 100 MiB.
const SharedArtifactMaxFiles = 200
