package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
)

// prune deletes the inventory's objects that refs, the new declaration, no
// longer lists, as writer.
func (c *Controller) prune(ctx context.Context, ml *mlv1.ManifestLock, st *manifestState, refs map[mlv1.ObjectRef]bool, writer dynamic.Interface) error {
	if writer == nil {
		writer = c.cfg.Dynamic
	}
	kept := st.inventory[:0:0]
	var gone []mlv1.ObjectRef
	for _, ref := range st.inventory {
		if refs[ref] {
			kept = append(kept, ref)
		} else {
			gone = append(gone, ref)
		}
	}
	// The reverse of the order they are created in: what lives in a
	// namespace, or is of a custom kind, before its Namespace or CRD.
	slices.SortStableFunc(gone, func(a, b mlv1.ObjectRef) int {
		return cmp.Compare(creationOrder(b), creationOrder(a))
	})
	var errs []error
	for _, ref := range gone {
		gvr, err := c.resourceOf(ref)
		if err == nil {
			err = resourceClient(writer, gvr, ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("pruning %s %s: %w", ref.Kind, ref.Name, err))
			kept = append(kept, ref)
			continue
		}
		c.cfg.Recorder.Event(manifestLockRef(ml), corev1.EventTypeNormal, EventPruned, fmt.Sprintf("%s %s: created by this lock, and no longer in its manifest", ref.Kind, inventoryName(ref)))
	}
	st.inventory = kept
	return errors.Join(errs...)
}

func creationOrder(ref mlv1.ObjectRef) int {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return engine.CreationOrder(schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
}

func (c *Controller) resourceOf(ref mlv1.ObjectRef) (schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	mapping, err := c.cfg.Mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	return mapping.Resource, nil
}

func resourceClient(client dynamic.Interface, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return client.Resource(gvr)
	}
	return client.Resource(gvr).Namespace(namespace)
}

func inventoryName(ref mlv1.ObjectRef) string {
	if ref.Namespace == "" {
		return ref.Name
	}
	return ref.Namespace + "/" + ref.Name
}
