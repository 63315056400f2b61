package storage

import (
	"encoding/json"
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
// they give none or its name is not the one Helm gives that revision of
// the release its labels name. Anyone who may write Secrets in a release
// namespace can label one as any revision; a Secret that also bears the
// revision's name is at least the one Helm would read and overwrite.
func Revision(obj metav1.Object) (int, bool) {
	labels := obj.GetLabels()
	v, err := strconv.Atoi(labels[LabelVersion])
	if err != nil || v <= 0 || obj.GetName() != SecretName(labels[LabelName], v) {
		return 0, false
	}
	return v, true
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

// InvalidError says a Secret does not hold a revision of the release it
// was read for: it is not Helm's, it is too large, it does not decode, or
// what it decodes to disagrees with its name, its labels or the release.
// Such a revision is never held, nor used in place of another.
type InvalidError struct {
	// Secret is the Secret's namespace/name.
	Secret string
	// Problem says what is wrong, to a person.
	Problem string
}

func (e *InvalidError) Error() string { return "release Secret " + e.Secret + ": " + e.Problem }

// Read decodes the release a Secret of Helm's Secret driver stores, and
// checks that it is a revision of release namespace/name: the Secret is in
// namespace, its labels and name say the revision of name it holds, and
// the release it decodes to has that name, namespace and revision. A
// tenant who may write Secrets in namespace can write any of those; what
// disagrees is refused before the manifest is parsed, since a release's
// name and namespace decide which objects, and whose, the lock holds.
func Read(secret *corev1.Secret, namespace, name string) (*Release, error) {
	rel, _, err := read(secret, namespace, name, false)
	return rel, err
}

// ReadJSON is Read for a caller that needs the whole release, its chart
// and values too: it makes Read's checks, inflating the release once, and
// also returns the release's JSON, from which what it returns was decoded.
func ReadJSON(secret *corev1.Secret, namespace, name string) (*Release, []byte, error) {
	return read(secret, namespace, name, true)
}

func read(secret *corev1.Secret, namespace, name string, whole bool) (*Release, []byte, error) {
	invalid := func(format string, args ...any) error {
		return &InvalidError{Secret: secret.Namespace + "/" + secret.Name, Problem: fmt.Sprintf(format, args...)}
	}
	if secret.Type != SecretType {
		return nil, nil, invalid("has type %q, not Helm's %q", secret.Type, SecretType)
	}
	if secret.Namespace != namespace || secret.Labels[LabelName] != name {
		return nil, nil, invalid("is labelled as release %s/%s, not %s/%s", secret.Namespace, secret.Labels[LabelName], namespace, name)
	}
	revision, ok := Revision(secret)
	if !ok {
		return nil, nil, invalid("its name does not agree with its labels %s=%q and %s=%q, as Helm names the Secret of a revision", LabelName, name, LabelVersion, secret.Labels[LabelVersion])
	}
	var rel *Release
	var raw []byte
	var err error
	if whole {
		if raw, err = DecodeJSON(secret.Data["release"]); err == nil {
			rel = &Release{}
			if err = json.Unmarshal(raw, rel); err != nil {
				err = fmt.Errorf("decoding release: %w", err)
			}
		}
	} else {
		rel, err = Decode(secret.Data["release"])
	}
	if err != nil {
		return nil, nil, invalid("%v", err)
	}
	if rel.Name != name || rel.Namespace != namespace || rel.Version != revision {
		return nil, nil, invalid("holds revision %d of release %s/%s, where its name and labels say revision %d of %s/%s",
			rel.Version, rel.Namespace, rel.Name, revision, namespace, name)
	}
	return rel, raw, nil
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
