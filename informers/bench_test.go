package informers

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkStubMemory reports the live heap an untracked object costs in an
// informer's store: its Stub plus the store's key and map entry. RSS adds
// the garbage collector's headroom on top (about 2x with GOGC=100).
func BenchmarkStubMemory(b *testing.B) {
	const n = 20000
	objs := make([]*unstructured.Unstructured, n)
	for i := range objs {
		objs[i] = cm(fmt.Sprintf("noise-%d", i%20), fmt.Sprintf("u%06d", i))
		objs[i].SetResourceVersion(fmt.Sprint(100000 + i))
	}
	var perObject float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		store := cache.NewStore(cache.MetaNamespaceKeyFunc)
		for _, o := range objs {
			if err := store.Add(NewStub(o)); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObject = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(store)
	}
	b.ReportMetric(perObject, "B/untracked-object")
}
