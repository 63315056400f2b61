// Command local-cluster runs the e2e control plane (etcd, kube-apiserver and
// kube-controller-manager) in the foreground until it is interrupted, for
// `make cluster`, `make demo` and poking at by hand.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

func main() {
	dir := flag.String("dir", ".cache/cluster", "folder for the cluster's data, logs and kubeconfig; emptied at start")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "local-cluster:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, tools, dir)
	if err != nil {
		return err
	}
	// The ready file tells hack/cluster.sh, which started us in the
	// background, that the kubeconfig works.
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(cp.Kubeconfig+"\n"), 0o644); err != nil {
		_ = cp.Stop()
		return err
	}
	fmt.Println(cp.Kubeconfig)
	<-ctx.Done()
	return cp.Stop()
}
