package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The floor of a cold lock: what a bare client takes to read every object
// of the locked types and watch them, as a client-go informer does at its
// start (a list in pages of 500, each object decoded whole, then a watch
// from the list's resourceVersion), every type at once, and nothing else.
// No lock can hold objects it has not read; the cold lock reads against
// this, measured on the same control plane right before the locker starts.

// floorTypes are the types the bench's releases lock.
var floorTypes = []schema.GroupVersionResource{cmGVR, svcGVR, deployGVR, secretGVR}

// listWatchFloor reads every object of floorTypes in every namespace, as
// the kubeconfig's identity, and opens a watch of each: the time it took,
// and the objects read.
func listWatchFloor(ctx context.Context, kubeconfig string) (time.Duration, int, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return 0, 0, err
	}
	// As the locker's: no client-side rate limit on its reads.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, -1
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, 0, err
	}
	counts := make([]int, len(floorTypes))
	errs := make([]error, len(floorTypes))
	start := time.Now()
	var wg sync.WaitGroup
	for i, gvr := range floorTypes {
		wg.Go(func() { errs[i] = readType(ctx, dyn, gvr, &counts[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	elapsed := time.Since(start)
	n := 0
	for _, c := range counts {
		n += c
	}
	return elapsed, n, nil
}

// readType lists gvr in pages, counting into n, and opens a watch from
// the list's resourceVersion.
func readType(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, n *int) error {
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := dyn.Resource(gvr).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("floor: listing %s: %w", gvr.Resource, err)
		}
		*n += len(list.Items)
		if opts.Continue = list.GetContinue(); opts.Continue != "" {
			continue
		}
		w, err := dyn.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), AllowWatchBookmarks: true})
		if err != nil {
			return fmt.Errorf("floor: watching %s: %w", gvr.Resource, err)
		}
		w.Stop()
		return nil
	}
}
