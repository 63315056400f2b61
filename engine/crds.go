package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// deletedCRDs are the types whose CRD the CRD watch last saw being
// deleted: a deletionTimestamp, set by the delete request, before the
// CRD's finalizer (customresourcecleanup.apiextensions.k8s.io) marks it
// Terminating and deletes its custom resources.
//
// A custom resource that finalizer deletes is recreated at once, and the
// API server refuses the creation only once its own cache of the CRD has
// the Terminating condition (see crdTerminating). Under load that cache
// can lag the deletion: a creation that slips in is not deleted again by
// the finalizer, which waits a minute for the type to be empty and then
// starts over, so the CRD's deletion takes a minute more. The deletion
// request comes two writes before the custom resources' deletions, and
// its event before theirs: a creation of a type whose CRD is seen deleted
// waits for the CRD to come back instead.
type deletedCRDs struct {
	mu    sync.Mutex
	types map[schema.GroupResource]bool
}

// seen records whether crd is being deleted. A CRD's last event, its
// deletion, has a deletionTimestamp too; the type stays marked until a
// CRD serving it is seen without one (recreated).
func (d *deletedCRDs) seen(crd *unstructured.Unstructured) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	gr := schema.GroupResource{Group: group, Resource: plural}
	d.mu.Lock()
	defer d.mu.Unlock()
	if crd.GetDeletionTimestamp() == nil {
		delete(d.types, gr)
		return
	}
	if d.types == nil {
		d.types = map[schema.GroupResource]bool{}
	}
	d.types[gr] = true
}

// has reports whether gr's CRD was last seen being deleted.
func (d *deletedCRDs) has(gr schema.GroupResource) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.types[gr]
}
