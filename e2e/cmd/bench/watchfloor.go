package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// The watch floor: what receiving a watch event costs a Go process on this
// machine when it decodes nothing. The bench runs itself as a bare watcher
// of every Deployment (-watch-floor) beside the locker all through the
// status and label churn, so both receive the same events over the same
// kind of connection (HTTP/2, TLS, JSON), and the locker's CPU per event
// reads against the floor of the same run.

// watchFloorReady is what the bare watcher logs once it watches.
const watchFloorReady = "watch floor: watching"

// runWatchFloor watches every Deployment and reads each event's bytes to
// its end, until it is signalled.
func runWatchFloor(kubeconfig string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	config.AcceptContentTypes, config.ContentType = "application/json", "application/json"
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		list, err := kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		body, err := kube.AppsV1().RESTClient().Get().Resource("deployments").
			VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: list.ResourceVersion}, metav1.ParameterCodec).Stream(ctx)
		if err != nil {
			return err
		}
		fmt.Println(watchFloorReady)
		r := bufio.NewReaderSize(body, 64<<10)
		for {
			// The API server ends each event with a line break.
			if _, err = r.ReadSlice('\n'); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		body.Close()
		if !errors.Is(err, io.EOF) && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// watchFloor is a running bare watcher.
type watchFloor struct{ *controlplane.Process }

// startWatchFloor starts a bare watcher and waits until it watches.
func startWatchFloor(ctx context.Context, kubeconfig, dir string) (*watchFloor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := controlplane.StartProcess("watch floor", self, []string{"-watch-floor", kubeconfig}, filepath.Join(dir, "watch-floor.log"))
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		log, _ := os.ReadFile(p.Log)
		if strings.Contains(string(log), watchFloorReady) {
			return &watchFloor{p}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = p.Stop(5 * time.Second)
			return nil, fmt.Errorf("the bare watcher did not start watching in 30 s: %s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *watchFloor) cpu() (time.Duration, error) { return processCPU(w.PID()) }
