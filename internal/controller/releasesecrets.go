package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// rejectedSecret remembers a release Secret found invalid, so that it is
// not read and decoded again, up to the bound of a release's size, at
// every sync until it changes: anyone who may write Secrets in the
// release namespace can write it.
type rejectedSecret struct {
	uid     types.UID
	version string
	err     error
}

// read returns the error secret was rejected with, if it is the one
// rejected and unchanged since; else it reads it, and remembers an
// invalid one.
func (r *rejectedSecret) read(secret metav1.Object, read func() (*storage.Release, []*unstructured.Unstructured, error)) (*storage.Release, []*unstructured.Unstructured, error) {
	if r.err != nil && r.uid == secret.GetUID() && r.version == secret.GetResourceVersion() {
		return nil, nil, r.err
	}
	rel, objs, err := read()
	var invalid *storage.InvalidError
	if errors.As(err, &invalid) {
		*r = rejectedSecret{uid: secret.GetUID(), version: secret.GetResourceVersion(), err: err}
	}
	return rel, objs, err
}

// enqueueForSecret queues every CR that names the Secret's release.
func (c *Controller) enqueueForSecret(obj any) {
	if keys, err := secretReleaseIndex(obj); err == nil && len(keys) > 0 {
		c.enqueueRelease(keys[0])
	}
}

func secretReleaseIndex(obj any) ([]string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	// A Secret not named as Helm names the revision its labels claim
	// is no revision of any release (see storage.Revision).
	if _, ok := storage.Revision(m); !ok {
		return nil, nil
	}
	return []string{m.GetNamespace() + "/" + m.GetLabels()[storage.LabelName]}, nil
}

// keepLastWrite drops a release Secret's managedFields but for the time of
// its last write, which stuckOn counts the Helm operation timeout from: an
// old revision Helm marks uninstalling was written now, not when it was
// created.
func keepLastWrite(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	last := storage.LastWrite(m)
	m.ManagedFields = nil
	if last.After(m.CreationTimestamp.Time) {
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Time: &metav1.Time{Time: last}}}
	}
	return m, nil
}

// latestSecret returns the metadata of the release's highest revision.
func (c *Controller) latestSecret(rk v1alpha1.ReleaseKey) *metav1.PartialObjectMetadata {
	objs, err := c.secrets.GetIndexer().ByIndex(byRelease, rk.Namespace+"/"+rk.Name)
	if err != nil {
		return nil
	}
	var metas []*metav1.PartialObjectMetadata
	for _, obj := range objs {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			metas = append(metas, m)
		}
	}
	latest, _ := storage.Latest(metas)
	return latest
}

// readRelease reads and decodes the Secret of a revision of release rk,
// checks it is one (see storage.Read), and parses its manifest.
func (c *Controller) readRelease(ctx context.Context, rk v1alpha1.ReleaseKey, latest *metav1.PartialObjectMetadata) (*storage.Release, []*unstructured.Unstructured, error) {
	var secret *corev1.Secret
	if v, ok := c.prefetched.Load(latest.Namespace + "/" + latest.Name); ok && v.(*corev1.Secret).ResourceVersion == latest.ResourceVersion {
		secret = v.(*corev1.Secret)
	} else {
		var err error
		if secret, err = c.cfg.Kube.CoreV1().Secrets(latest.Namespace).Get(ctx, latest.Name, metav1.GetOptions{}); err != nil {
			return nil, nil, err
		}
	}
	rel, err := storage.Read(secret, rk.Namespace, rk.Name)
	if err != nil {
		return nil, nil, err
	}
	objs, err := rel.Objects()
	if err != nil {
		return nil, nil, &storage.InvalidError{Secret: secret.Namespace + "/" + secret.Name, Problem: err.Error()}
	}
	return rel, objs, nil
}

// noSecretStatus reports a release with no Secrets. The lock is open and
// nothing is deleted. If Helm's ConfigMap driver holds the release, it says
// so, since that driver is not supported.
func (c *Controller) noSecretStatus(ctx context.Context, hr *v1alpha1.HelmRelease) (v1alpha1.HelmReleaseStatus, error) {
	rk := hr.Spec.Release
	cms, err := c.cfg.Kube.CoreV1().ConfigMaps(rk.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: storage.Selector(rk.Name),
		Limit:         1,
	})
	if err == nil && len(cms.Items) > 0 {
		return openStatus(hr, v1alpha1.StateError, 0, v1alpha1.ReasonUnsupportedStorageDriver,
			fmt.Sprintf("release %s/%s is stored in ConfigMaps (HELM_DRIVER=configmap); only Helm's default Secret driver is supported", rk.Namespace, rk.Name)), nil
	}
	return openStatus(hr, v1alpha1.StateSecretNotFound, 0, v1alpha1.ReasonSecretNotFound,
		fmt.Sprintf("no Secret of type %s holds release %s/%s; nothing is held and nothing is deleted", storage.SecretType, rk.Namespace, rk.Name)), nil
}
