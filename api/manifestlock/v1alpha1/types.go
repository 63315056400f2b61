package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	helmv1 "github.com/helm-locker/helm-locker/api/v1alpha1"
)

// Group, Version and Kind of the ManifestLock API. It is helm-locker's
// own, beside rancher/helm-locker's helm.cattle.io.
const (
	Group   = "helm-locker.io"
	Version = "v1alpha1"
	Kind    = "ManifestLock"
)

// SchemeGroupVersion is the group and version of every type here.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Resource is the plural resource the CRD serves.
var Resource = SchemeGroupVersion.WithResource("manifestlocks")

// ManagedByAnnotation names the controller (its --controller-name) that
// serves a ManifestLock: another leaves it alone. Without it, a lock in a
// registration namespace is served by that namespace's locker, and one in
// any other namespace by lockers run with --tenant-manifest-locks.
const ManagedByAnnotation = "helm-locker.io/managed-by"

// MarkerAnnotation, namespace/name of the lock, is declared on every object
// of a ManifestLock in Prevent mode, so that it is on each object the lock
// creates or adopts: the admission webhook is sent requests only for
// objects that carry it or Helm's release annotation.
const MarkerAnnotation = "helm-locker.io/manifest-lock"

// WritersAnnotation, on a ServiceAccount, names the ManifestLocks of its
// namespace that may write as it: a comma-separated list of lock names,
// or "*" for every lock there. A lock outside the registration namespace
// is a tenant's, and RBAC grants ManifestLock create apart from any
// ServiceAccount's power: without this opt-in, whoever may create a lock
// could write as the most powerful account of the namespace. Kubernetes
// lets a pod run as any account of its namespace, but creating pods is
// not what a lock's author was granted. A lock in the registration
// namespace is an admin's, and needs no opt-in.
const WritersAnnotation = "helm-locker.io/manifest-locks"

// The reasons a ManifestLock gives, in its conditions and in
// status.notLocked, for what a tenant's lock does not hold. Whatever the
// order the locks were created in, a tenant's lock never holds, and Prevent
// mode never judges for it, an object it did not create or adopt with its
// own MarkerAnnotation.
const (
	// ReasonWriterNotPermitted: the ServiceAccount the lock writes as
	// does not name the lock in its WritersAnnotation (or does not
	// exist). The lock holds nothing and writes nothing.
	ReasonWriterNotPermitted = "WriterNotPermitted"
	// ReasonForbidden: the lock names objects a tenant's lock may not
	// hold (cluster-scoped, or of another namespace), and nothing is
	// held; or, on one object in status.notLocked, the object exists
	// without the lock's marker and the lock's writer may not write it
	// (a server-side dry run adding the marker, as the writer, was
	// refused), so the lock does not adopt it.
	ReasonForbidden = "Forbidden"
	// ReasonInstalledByHelm: the object carries Helm's ownership
	// annotations (meta.helm.sh/release-name and release-namespace).
	// Helm's operations on a release are never stopped by a tenant's
	// lock, whoever created the object: an admin who installs a chart
	// into a tenant's namespace must be able to upgrade it and delete
	// its objects. A HelmRelease holds a release.
	ReasonInstalledByHelm = "InstalledByHelm"
	// ReasonNotMarked: the lock was about to write an object that exists
	// without its MarkerAnnotation, and is not the one it adopted when it
	// read its manifest (someone else created it since, or took the
	// marker off). The lock wrote nothing to it, and decides again
	// whether it may adopt it.
	ReasonNotMarked = "NotMarked"
)

// The reasons only a ManifestLock gives, of Ready (and of Locked while the
// lock is open). The objects of the last manifest read stay held; the
// other reasons are HelmRelease's (see the Reason constants of
// helm.cattle.io/v1alpha1).
const (
	// ReasonManifestUnavailable: spec.manifestFrom names a ConfigMap or
	// Secret, or a key of it, that does not exist, or neither
	// spec.manifest nor spec.manifestFrom is set.
	ReasonManifestUnavailable = "ManifestUnavailable"
	// ReasonInvalidManifest: the manifest does not parse, or an object
	// of it cannot be held as it is written.
	ReasonInvalidManifest = "InvalidManifest"
	// ReasonSourceNotServed: the cluster does not serve spec.sourceRef's
	// kind (Flux's CRDs are not installed). The lock proceeds once they
	// are.
	ReasonSourceNotServed = helmv1.ReasonChartSourceNotServed
	// ReasonSourceNotReady: the source does not exist, or has no
	// artifact yet.
	ReasonSourceNotReady = helmv1.ReasonChartSourceNotReady
	// ReasonArtifactDigestMismatch: the artifact downloaded is not the
	// one its source's status names, or could not be downloaded.
	ReasonArtifactDigestMismatch = helmv1.ReasonChartDigestMismatch
	// ReasonArtifactTooLarge: the artifact, unpacked or not, or what it
	// builds, is past the locker's caps.
	ReasonArtifactTooLarge = helmv1.ReasonChartTooLarge
	// ReasonUnsafeArtifact: the artifact holds a symlink, a link, or a
	// path that leaves its folder, and is refused whole.
	ReasonUnsafeArtifact = helmv1.ReasonChartUnsafe
	// ReasonPathNotFound: spec.path is not a folder of the artifact.
	ReasonPathNotFound = "PathNotFound"
	// ReasonBuildFailed: Kustomize failed, with its own error, or the
	// kustomization names what a lock does not build: a remote base or
	// file, a plugin that is not builtin, a Helm chart.
	ReasonBuildFailed = "BuildFailed"
)

// ManifestLock holds the objects of a raw manifest as it declares them:
// what is missing is applied, edits are reverted and deleted objects are
// recreated. The manifest may come from any tool: kubectl, kustomize build,
// helm template.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type ManifestLock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the manifest to hold, and how.
	Spec ManifestLockSpec `json:"spec"`
	// Status is what the locker reports of the lock.
	Status ManifestLockStatus `json:"status,omitempty"`
}

// ManifestLockSpec says what to hold and how.
type ManifestLockSpec struct {
	// Manifest is the objects, as multi-document YAML or JSON.
	Manifest string `json:"manifest,omitempty"`
	// ManifestFrom reads the manifest from a key of a ConfigMap or Secret
	// in the lock's namespace, for sets larger than a CR may hold. It is
	// watched: a change of it is a new declaration.
	ManifestFrom *ManifestSource `json:"manifestFrom,omitempty"`
	// SourceRef names a Flux source (GitRepository, OCIRepository,
	// Bucket) or an ExternalArtifact whose artifact holds the manifest:
	// the folder Path of it, built with Kustomize where it holds a
	// kustomization, else its YAML files. The locker reads the source
	// and downloads its artifact itself; a new artifact revision is a new
	// declaration. Exactly one of Manifest, ManifestFrom and SourceRef is
	// set.
	SourceRef *SourceReference `json:"sourceRef,omitempty"`
	// Path is the folder of SourceRef's artifact to build, relative to
	// its root; a "./" prefix is optional, and empty means the root.
	Path string `json:"path,omitempty"`
	// Namespace is given to namespaced objects that name none; empty
	// means the lock's own namespace.
	Namespace string `json:"namespace,omitempty"`
	// Prune deletes the objects this lock created (status.inventory)
	// that a new version of the manifest no longer lists. Objects that
	// existed before the lock adopted them are never deleted, and
	// neither is anything when the lock itself is deleted.
	//
	// +kubebuilder:default=false
	Prune bool `json:"prune,omitempty"`
	// Mode is Enforce (the default), which reverts drift; Warn, which
	// reports drift and never writes; or Prevent, which is Enforce and
	// also denies, at admission, a write that would drift an object.
	//
	// +kubebuilder:default=Enforce
	Mode helmv1.Mode `json:"mode,omitempty"`
	// Suspend opens the lock while true; setting it back re-locks at once.
	//
	// +kubebuilder:default=false
	Suspend bool `json:"suspend,omitempty"`
	// Ignore lists fields that are neither compared nor reverted, as on
	// HelmRelease.
	Ignore []helmv1.IgnoreRule `json:"ignore,omitempty"`
	// ServiceAccountName, in the lock's namespace, is the identity every
	// write of the lock impersonates. Empty takes the locker's
	// --default-service-account, then the namespace's default
	// ServiceAccount; a lock in the registration namespace with neither
	// writes as the locker. A tenant's lock may write only as an account
	// that names it in its WritersAnnotation.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// ManifestSource names where a manifest is kept. Exactly one is set.
type ManifestSource struct {
	// ConfigMapRef is a key of a ConfigMap that holds the manifest.
	ConfigMapRef *KeyRef `json:"configMapRef,omitempty"`
	// SecretRef is a key of a Secret that holds the manifest.
	SecretRef *KeyRef `json:"secretRef,omitempty"`
}

// SourceReference names a source of the group source.toolkit.fluxcd.io
// whose status.artifact is a tar.gz of manifests, as Flux's Kustomization
// names one.
type SourceReference struct {
	// Kind is GitRepository, OCIRepository, Bucket or ExternalArtifact.
	Kind string `json:"kind"`
	// Name is the source's name.
	Name string `json:"name"`
	// Namespace is the source's namespace; empty means the lock's own.
	// Only a lock in the registration namespace (an admin's) may name
	// another: a tenant's lock that does is Forbidden before anything is
	// read, as Flux's --no-cross-namespace-refs.
	Namespace string `json:"namespace,omitempty"`
}

// The kinds a SourceReference may name.
const (
	SourceGitRepository    = "GitRepository"
	SourceOCIRepository    = "OCIRepository"
	SourceBucket           = "Bucket"
	SourceExternalArtifact = "ExternalArtifact"
)

// SourceGroup is the API group of the kinds a SourceReference names.
const SourceGroup = "source.toolkit.fluxcd.io"

// KeyRef is one key of a ConfigMap or Secret in the lock's namespace.
type KeyRef struct {
	// Name is the ConfigMap's or Secret's name.
	Name string `json:"name"`
	// Key is the key of its data that holds the manifest.
	Key string `json:"key"`
}

// State is the summary a user reads in `kubectl get manifestlocks`.
type State string

// The states.
const (
	// StateLocked: every object is held as declared.
	StateLocked State = "Locked"
	// StateWatching: in Warn mode, every object is checked and drift is
	// reported.
	StateWatching State = "Watching"
	// StateReconciling: objects are being applied, checked or corrected.
	StateReconciling State = "Reconciling"
	// StateSuspended: spec.suspend opened the lock.
	StateSuspended State = "Suspended"
	// StateError: the lock cannot hold its manifest as it stands (see
	// the Ready condition).
	StateError State = "Error"
)

// ManifestLockStatus reports what the locker knows of the lock. Its
// conditions and counters mean what HelmRelease's do.
type ManifestLockStatus struct {
	// State summarises the lock.
	State             State `json:"state,omitempty"`
	helmv1.LockStatus `json:",inline"`
	// ManifestDigest is the sha256 of the manifest held.
	ManifestDigest string `json:"manifestDigest,omitempty"`
	// LastAppliedRevision is the revision of spec.sourceRef's artifact
	// whose build the lock holds, as the source names it.
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`
	// LastAttemptedRevision is the last revision read, held or not.
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`
	// Inventory lists the objects this lock created: the only ones
	// spec.prune may delete.
	Inventory []ObjectRef `json:"inventory,omitempty"`
}

// ObjectRef names one object of a lock's inventory.
type ObjectRef struct {
	// APIVersion is the object's group and version, such as apps/v1.
	APIVersion string `json:"apiVersion"`
	// Kind is the object's kind.
	Kind string `json:"kind"`
	// Namespace is the object's namespace; empty when cluster-scoped.
	Namespace string `json:"namespace,omitempty"`
	// Name is the object's name.
	Name string `json:"name"`
}
