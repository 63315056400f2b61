package informers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// crdResource is the CustomResourceDefinition type itself.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// watchCRDs runs a metadata-sized informer on CRDs until ctx is done, and
// closes the returned channel once it has stopped. Every change after the
// initial list, including a CRD becoming Established, restarts informers of
// missing types and tells the caller that types changed.
func (r *Registry) watchCRDs(ctx context.Context) <-chan struct{} {
	crds := r.client.Resource(crdResource)
	informer := cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(Guard(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return crds.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return crds.Watch(ctx, o)
			},
		}, r.opts.Readiness, nil), r.client),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ObjectDescription: crdResource.String()})
	// CRDs carry their whole OpenAPI schema; only the fact of a change
	// matters here.
	_ = informer.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		if r.opts.OnCRD != nil {
			r.opts.OnCRD(u)
		}
		return &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
			ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()},
		}, nil
	})
	changed := func() {
		r.retryMissing()
		if r.opts.OnTypesChanged != nil {
			r.opts.OnTypesChanged()
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if !initial {
				changed()
			}
		},
		UpdateFunc: func(_, _ any) { changed() },
		DeleteFunc: func(_ any) { changed() },
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		informer.RunWithContext(ctx)
	}()
	return done
}
