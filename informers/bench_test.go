package informers

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// BenchmarkUntrackedMemory reports the live heap a running informer keeps
// per object no caller tracks: the registry's share of the locker's memory
// on a cluster full of objects it does not lock. The objects are listed
// through a fake client, whose own copies are in the baseline.
func BenchmarkUntrackedMemory(b *testing.B) {
	const n = 20000
	objs := make([]k8sruntime.Object, n)
	for i := range objs {
		o := cm(fmt.Sprintf("noise-%d", i%20), fmt.Sprintf("u%06d", i))
		o.SetResourceVersion(fmt.Sprint(100000 + i))
		objs[i] = o
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), map[schema.GroupVersionResource]string{
		cmGVR:       "ConfigMapList",
		crdResource: "CustomResourceDefinitionList",
	}, objs...)
	// The fake converts its objects on the first list; do that outside
	// the measurement.
	if _, err := client.Resource(cmGVR).List(context.Background(), metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	var perObject float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := NewRegistry(client, Options{Tracked: func(schema.GroupVersionResource, string, string) bool { return false }})
		r.Acquire(cmGVR)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		if !r.WaitForAllSynced(ctx) {
			b.Fatal("registry did not sync")
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObject = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perObject, "B/untracked-object")
}
