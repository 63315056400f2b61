package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// holding is what a ManifestLock's declaration found of its objects on the
// API server, from one read of each (see heldObjects).
type holding struct {
	// objs are the manifest's objects the lock holds: all of an admin's,
	// and of a tenant's those tenantHolds allows; unheld says why it
	// does not hold the others.
	objs   []*unstructured.Unstructured
	unheld []v1alpha1.ObjectProblem
	// missing are the objects that do not exist and are not in the
	// inventory already: the lock creates them, so they are its to
	// prune.
	missing map[mlv1.ObjectRef]bool
	// adopted are the UIDs of a tenant's objects that exist without its
	// marker and that its writer may write (see tenantHolds): the lock's
	// first write to each puts the marker on (see tenantWriteGuard).
	adopted map[types.UID]bool
}

// heldObjects reads the metadata of each of the manifest's objects once,
// and decides from that one read both which the lock holds and which it
// is to create: two reads would cost twice the requests, and an object
// created between them would be held as one the lock made. refs are the
// objects as manifestRefs names them, inventory those the lock created
// before. An admin's lock holds all its objects, and reads only those
// outside its inventory, and none on a replica standing by, which creates
// nothing; a tenant's reads all (see tenantHolds).
func (c *Controller) heldObjects(ctx context.Context, ml *mlv1.ManifestLock, objs []*unstructured.Unstructured, refs map[mlv1.ObjectRef]bool, namespace string, writer dynamic.Interface, inventory []mlv1.ObjectRef) (holding, error) {
	tenant := c.isTenant(ml)
	if !tenant && c.readOnly.Load() {
		return holding{objs: objs}, nil
	}
	live := make(map[mlv1.ObjectRef]*metav1.PartialObjectMetadata, len(refs))
	missing := map[mlv1.ObjectRef]bool{}
	for ref := range refs {
		created := slices.Contains(inventory, ref)
		if created && !tenant {
			continue
		}
		m, err := c.readObject(ctx, ref)
		if err != nil {
			return holding{}, err
		}
		live[ref] = m
		if m == nil && !created {
			missing[ref] = true
		}
	}
	h := holding{objs: objs}
	if tenant {
		var err error
		if h, err = c.tenantHolds(ctx, ml, objs, namespace, writer, live); err != nil {
			return holding{}, err
		}
	}
	h.missing = missing
	return h, nil
}

// readObject reads the metadata of the object ref names: nil if it does
// not exist, as no object of a kind not served yet (such as one whose CRD
// the manifest declares) does.
func (c *Controller) readObject(ctx context.Context, ref mlv1.ObjectRef) (*metav1.PartialObjectMetadata, error) {
	gvr, err := c.resourceOf(ref)
	if err != nil {
		return nil, nil
	}
	var m *metav1.PartialObjectMetadata
	if ref.Namespace == "" {
		m, err = c.cfg.Metadata.Resource(gvr).Get(ctx, ref.Name, metav1.GetOptions{})
	} else {
		m, err = c.cfg.Metadata.Resource(gvr).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s %s: %w", ref.Kind, inventoryName(ref), err)
	}
	return m, nil
}
