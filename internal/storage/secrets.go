package storage

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Helm's storage labels, on release Secrets (and on the ConfigMaps of its
// ConfigMap driver).
const (
	LabelOwner   = "owner"
	LabelName    = "name"
	LabelStatus  = "status"
	LabelVersion = "version"
)

// SecretType is the type Helm's Secret driver gives its Secrets.
const SecretType = "helm.sh/release.v1"

// OwnedSelector selects every object Helm's storage drivers write.
const OwnedSelector = LabelOwner + "=helm"

// Selector selects the stored revisions of the release name.
func Selector(name string) string { return OwnedSelector + "," + LabelName + "=" + name }

// SecretName is the name of the Secret Helm keeps revision of release in.
func SecretName(release string, revision int) string {
	return fmt.Sprintf("sh.helm.release.v1.%s.v%d", release, revision)
}

// Revision is the revision a stored release's labels give, or false if
// they give none.
func Revision(obj metav1.Object) (int, bool) {
	v, err := strconv.Atoi(obj.GetLabels()[LabelVersion])
	return v, err == nil
}

// Latest returns the stored revision with the highest number, or nil.
func Latest[T metav1.Object](objs []T) (latest T, ok bool) {
	best := -1
	for _, o := range objs {
		if v, valid := Revision(o); valid && v > best {
			latest, best, ok = o, v, true
		}
	}
	return latest, ok
}

// Read decodes the release a Secret of Helm's Secret driver stores.
func Read(secret *corev1.Secret) (*Release, error) {
	if secret.Type != SecretType {
		return nil, fmt.Errorf("Secret %s/%s has type %q, not Helm's %q", secret.Namespace, secret.Name, secret.Type, SecretType)
	}
	rel, err := Decode(secret.Data["release"])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return rel, nil
}

// Helm's ownership metadata. Helm adds it to every object as it applies
// the manifest; it is not in the stored manifest.
const (
	LabelManagedBy         = "app.kubernetes.io/managed-by"
	AnnotationReleaseName  = "meta.helm.sh/release-name"
	AnnotationReleaseSpace = "meta.helm.sh/release-namespace"
)

// holdOwnership declares Helm's ownership metadata on obj, as Helm applies
// it: tools that find a release's objects by it, and Helm's own check that
// an object it applies afresh belongs to the release, lose track of an
// object that lost it.
func (r *Release) holdOwnership(obj *unstructured.Unstructured) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy] = "Helm"
	obj.SetLabels(labels)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationReleaseName] = r.Name
	annotations[AnnotationReleaseSpace] = r.Namespace
	obj.SetAnnotations(annotations)
}
