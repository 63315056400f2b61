package engine

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// live returns the object from the informer cache, or, while the cache is
// not synced, does not hold it, or holds a stale stand-in, from the sync's
// reads ahead or the API server. inLine is true, with no object, when the
// cache says the object was as declared by obj's current declaration when
// last stored.
func (e *Engine) live(ctx context.Context, obj *lockedObject, reads readAhead) (live *unstructured.Unstructured, inLine bool, err error) {
	ref := obj.ref()
	if p := obj.proof; p != nil && !p.checked {
		// The first check of an unverified object decides what the
		// owner applied (see Verification), so it reads the object as
		// it is now: the cache may not show the owner's writes yet,
		// though the declaration that followed them has arrived.
		live, err = e.resource(ref).Get(ctx, ref.Name, metav1.GetOptions{})
		return live, false, err
	}
	cached, exists, synced, err := e.cached(ref.GVR, ref.Namespace, ref.Name)
	// The cache does not hold objects that were untracked at their last
	// event, so a missing object is looked up: it may have been created
	// while no release locked it. A deleted object costs one GET more.
	if err == nil && synced && exists {
		switch c := cached.(type) {
		case *unstructured.Unstructured:
			return c, false, nil
		case *inLineStub:
			if c.generation == obj.generation {
				return nil, true, nil
			}
		}
	}
	if read, ok := reads.get(ref); ok {
		if read == nil {
			return nil, false, apierrors.NewNotFound(schema.GroupResource{Group: ref.GVR.Group, Resource: ref.GVR.Resource}, ref.Name)
		}
		return read, false, nil
	}
	live, err = e.resource(ref).Get(ctx, ref.Name, metav1.GetOptions{})
	return live, false, err
}

// dynamicResource is a namespaced or cluster-wide dynamic client.
type dynamicResource = dynamic.ResourceInterface

// resource is the client of ref's resource, for reads.
func (e *Engine) resource(ref ObjectRef) dynamicResource {
	return resourceOf(e.client, ref)
}

// writer is the client of ref's resource for the writes of spec's set.
func (e *Engine) writer(spec ObjectSet, ref ObjectRef) dynamicResource {
	if spec.Writer != nil {
		return resourceOf(spec.Writer, ref)
	}
	return e.resource(ref)
}

func resourceOf(client dynamic.Interface, ref ObjectRef) dynamicResource {
	r := client.Resource(ref.GVR)
	if ref.Namespace == "" {
		return r
	}
	return r.Namespace(ref.Namespace)
}
