package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API, as rancher/helm-locker defines them.
const (
	Group   = "helm.cattle.io"
	Version = "v1alpha1"
	Kind    = "HelmRelease"
)

// SchemeGroupVersion is the group and version of every type here.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Resource is the plural resource the CRD serves.
var Resource = SchemeGroupVersion.WithResource("helmreleases")

// ManagedByAnnotation lets several lockers share one registration namespace:
// an operator claims CRs without it and leaves CRs that name another
// controller alone.
const ManagedByAnnotation = "helmreleases.cattle.io/managed-by"

// HelmRelease registers one Helm release to be locked.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type HelmRelease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the release to lock and says how to hold it.
	Spec HelmReleaseSpec `json:"spec"`
	// Status is what the locker reports of the release and the lock.
	Status HelmReleaseStatus `json:"status,omitempty"`
}

// HelmReleaseSpec names the release and says how to hold it. Every field
// but Release is optional, so CRs written for rancher/helm-locker keep
// their meaning: enforce, not suspended, nothing ignored.
type HelmReleaseSpec struct {
	// Release is the Helm release to lock, by name and namespace as
	// given to helm -n.
	Release ReleaseKey `json:"release"`
	// Mode is Enforce (the default), which reverts drift; Warn, which
	// reports drift and never writes; or Prevent, which is Enforce and
	// also denies, at admission, a write that would drift an object.
	//
	// +kubebuilder:default=Enforce
	Mode Mode `json:"mode,omitempty"`
	// Suspend opens the lock while true; setting it back re-locks at once.
	//
	// +kubebuilder:default=false
	Suspend bool `json:"suspend,omitempty"`
	// Ignore lists fields that are neither compared nor reverted, such as
	// the replicas an autoscaler sets.
	Ignore []IgnoreRule `json:"ignore,omitempty"`
	// ServiceAccountName, in the release namespace, is the identity every
	// write of the lock impersonates, so that the lock can do no more
	// than that account may. Empty takes the locker's
	// --default-service-account, or the locker's own identity if that is
	// empty too.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Rerender says what the locker does when the cluster moves under
	// the release, so that its chart would render differently now: Off
	// (the default) does nothing, Report renders the chart again and
	// reports what would change, and Upgrade also upgrades the release
	// through Helm with that render. Empty takes the locker's
	// --default-rerender.
	Rerender Rerender `json:"rerender,omitempty"`
	// ChartRef names where the release's chart comes from, as Flux's
	// source-controller fetched and packaged it, dependencies included,
	// for spec.rerender Report and Upgrade. Helm stores a release's chart
	// without its dependencies: a chart built on a library chart cannot
	// be rendered from its release at all, and a parent's subcharts
	// render none of their objects and lookups. With ChartRef the locker
	// renders the source's chart, only while its own files are the ones
	// the verified revision stored (else Rendered is ChartMismatch), and
	// compares and watches its subcharts' objects and lookups too. It
	// is an admin's word on where the chart comes from: a Secret writer
	// can rewrite a revision's chart, not what source-controller
	// fetched.
	ChartRef *ChartReference `json:"chartRef,omitempty"`
}

// ChartReference names a Flux source whose artifact is a release's chart
// (see HelmReleaseSpec.ChartRef), in group source.toolkit.fluxcd.io.
type ChartReference struct {
	// Kind is HelmChart, OCIRepository (whose artifact is a chart) or
	// ExternalArtifact.
	Kind string `json:"kind"`
	// Name is the source's name.
	Name string `json:"name"`
	// Namespace is the source's namespace; empty means the HelmRelease's
	// own.
	Namespace string `json:"namespace,omitempty"`
}

// The kinds a ChartReference may name.
const (
	ChartSourceHelmChart        = "HelmChart"
	ChartSourceOCIRepository    = "OCIRepository"
	ChartSourceExternalArtifact = "ExternalArtifact"
)

// Rerender says whether the locker renders a release's chart again. Helm
// renders a chart once, against the cluster as it is at install: a
// `lookup` target or the cluster's capabilities that change afterwards
// leave the stored manifest stale, and the lock would hold it faithfully.
type Rerender string

// The values of Rerender.
const (
	// RerenderOff renders nothing again: the stored manifest is held as
	// it is.
	RerenderOff Rerender = "Off"
	// RerenderReport renders the chart again, as the release's write
	// identity, and reports what would change in the Rendered condition
	// and status.rerender.
	RerenderReport Rerender = "Report"
	// RerenderUpgrade is Report, and also upgrades the release through
	// Helm with that render.
	RerenderUpgrade Rerender = "Upgrade"
)

// Mode says what the locker does about drift.
type Mode string

// The modes.
const (
	// ModeEnforce reverts drift: a changed field is put back and a
	// deleted object recreated.
	ModeEnforce Mode = "Enforce"
	// ModeWarn reports drift and never writes.
	ModeWarn Mode = "Warn"
	// ModePrevent is Enforce, and also denies at admission a write that
	// would drift a locked object. Admission fails open: see the
	// AdmissionAnswered condition.
	ModePrevent Mode = "Prevent"
)

// IgnoreRule exempts fields from the lock, for the objects Target selects
// (every object of the release when Target is nil).
type IgnoreRule struct {
	// Paths are RFC 6901 JSON pointers, such as /spec/replicas or
	// /metadata/annotations/example.com~1injected.
	Paths []string `json:"paths"`
	// Target selects objects; empty fields match everything.
	Target *IgnoreTarget `json:"target,omitempty"`
}

// IgnoreTarget selects objects of a release. Name and Namespace are
// regular expressions matched against the whole name (anchored).
type IgnoreTarget struct {
	// Group is the objects' API group, such as apps; empty matches every
	// group, the core group among them.
	Group string `json:"group,omitempty"`
	// Version is the objects' API version, such as v1; empty matches
	// every version.
	Version string `json:"version,omitempty"`
	// Kind is the objects' kind, such as Deployment; empty matches every
	// kind.
	Kind string `json:"kind,omitempty"`
	// Name is a regular expression the whole object name must match;
	// empty matches every name.
	Name string `json:"name,omitempty"`
	// Namespace is a regular expression the whole object namespace must
	// match; empty matches every namespace.
	Namespace string `json:"namespace,omitempty"`
}

// UnlockAnnotation, set to "false" on an object in a chart's templates,
// leaves that one object out of the lock. Only the manifest counts: the
// annotation on a live object does not unlock it, or anyone able to edit the
// object could lift the lock.
const UnlockAnnotation = "helmreleases.cattle.io/lock"

// ReleaseKey identifies a Helm release by name and namespace, as `helm -n`
// does.
type ReleaseKey struct {
	// Name is the release name, as Helm allows it: lowercase letters,
	// digits, '-' and '.', at most 53 characters.
	Name string `json:"name"`
	// Namespace is the namespace the release was installed into, a
	// DNS-1123 label.
	Namespace string `json:"namespace"`
}

// State is the summary a user reads in `kubectl get helmreleases`. The
// values are rancher/helm-locker's, so dashboards built on it keep working.
type State string

// The states. Deployed is reported only once every object of the locked
// revision has been checked and brought in line.
const (
	// StateDeployed: the latest revision is deployed, and every object
	// of it has been checked and brought in line.
	StateDeployed State = "Deployed"
	// StateTransitioning: Helm is working on the release, and the lock is
	// open until it is deployed again; or the lock is still checking the
	// objects of a deployed revision.
	StateTransitioning State = "Transitioning"
	// StateFailed: the latest revision failed; its manifest is not held.
	StateFailed State = "Failed"
	// StateUninstalled: the release was uninstalled with its history
	// kept; nothing is held.
	StateUninstalled State = "Uninstalled"
	// StateSecretNotFound: no Secret holds the release; nothing is held.
	StateSecretNotFound State = "SecretNotFound"
	// StateError: the lock cannot hold the release as it stands, such as
	// with an invalid spec.ignore or a release stored in ConfigMaps (see
	// the Locked condition).
	StateError State = "Error"
	// StateUnknown: the latest revision has a status the locker does
	// not hold, such as superseded; nothing is held.
	StateUnknown State = "Unknown"
	// StateSuspended: spec.suspend opened the lock.
	StateSuspended State = "Suspended"
)

// The condition types.
const (
	// ConditionLocked is True once every object of the locked revision
	// has been checked and corrected, and False, with a reason, whenever
	// the lock is open or in Warn mode.
	ConditionLocked = "Locked"
	// ConditionDrifted is True while an object differs from the manifest:
	// in Warn mode, while a fight holds corrections back, or until a
	// correction lands.
	ConditionDrifted = "Drifted"
	// ConditionFighting is True while another field manager keeps
	// rewriting a locked field and the locker is backing off.
	ConditionFighting = "Fighting"
	// ConditionReady is True when the lock does what the spec asks with
	// nothing in its way: every object checked, none failing, no fight.
	ConditionReady = "Ready"
	// ConditionAdmissionAnswered is set on a lock in Prevent mode while
	// the webhook is on: True while the API server reaches the webhook,
	// False when no probe has been answered for 3 minutes. Admission fails
	// open (failurePolicy Ignore), so without it nothing would say that
	// edits are let through and only reverted after the fact. The locker
	// learns it by a probe: a dry-run request through the API server,
	// whose answer only the webhook can give, sent every minute, and every
	// 5 seconds after one goes unanswered until one is: two dozen or so go
	// unanswered before it turns False, and it turns True again within
	// seconds of the webhook answering.
	ConditionAdmissionAnswered = "AdmissionAnswered"
	// ConditionRendered is set with spec.rerender Report or Upgrade: True
	// while the chart, rendered again against the cluster as it is now,
	// renders what the locked revision stores; False, with reason
	// ClusterChanged, when it would render differently; Unknown (or
	// False) with another reason when it cannot be rendered.
	ConditionRendered = "Rendered"
)

// The reasons of ConditionAdmissionAnswered.
const (
	// ReasonAdmissionAnswered: the API server relayed the webhook's
	// answer to the last probe.
	ReasonAdmissionAnswered = "Answered"
	// ReasonAdmissionProbing: no probe has been answered yet, and the
	// first 3 minutes since the probe started have not passed.
	ReasonAdmissionProbing = "Probing"
	// ReasonAdmissionNotAnswered: no probe was answered for
	// 3 minutes: Prevent mode is failing open.
	ReasonAdmissionNotAnswered = "NotAnswered"
)

// HelmReleaseStatus reports what the locker knows of the release.
type HelmReleaseStatus struct {
	// State summarises the release and the lock.
	State State `json:"state,omitempty"`
	// Version is the release revision that is locked.
	Version int `json:"version,omitempty"`
	// Description is the release's own description of its last action.
	Description string `json:"description,omitempty"`
	// Notes are the rendered NOTES.txt of the release.
	Notes      string `json:"notes,omitempty"`
	LockStatus `json:",inline"`
	// Verified is the last revision the locker trusts (see
	// VerifiedRevision).
	Verified *VerifiedRevision `json:"verified,omitempty"`
	// Rerender is what the last render of the chart found, with
	// spec.rerender Report or Upgrade.
	Rerender *RenderStatus `json:"rerender,omitempty"`
	// FailedUpgrade is the last upgrade of spec.rerender Upgrade that
	// Helm failed (see FailedUpgrade); replaced when another fails, and
	// unset once one succeeds.
	FailedUpgrade *FailedUpgrade `json:"failedUpgrade,omitempty"`
}

// FailedUpgrade records an upgrade of spec.rerender Upgrade that Helm
// failed. Kept in the status, it outlives a restart of the locker and a
// change of leader: the upgrade is not tried again for the same render,
// and a revision it left failed does not open the lock.
type FailedUpgrade struct {
	// Release is the release the upgrade was of.
	Release ReleaseKey `json:"release"`
	// RenderDigest is the sha256 of the render the upgrade was tried
	// with: it is not tried again for that render.
	RenderDigest string `json:"renderDigest"`
	// Cause is what made the chart render differently, as
	// status.rerender.cause said then.
	Cause string `json:"cause,omitempty"`
	// Error is Helm's error, at most MaxFailedUpgradeError bytes of it.
	Error string `json:"error,omitempty"`
	// Revision is the revision Helm left failed as the release's
	// latest (the upgrade's, or that of the rollback after it): while
	// its Secret, SecretUID, is the latest revision, the lock holds the
	// last verified revision past it. Zero when Helm rolled the failure
	// back to a deployed revision.
	Revision int `json:"revision,omitempty"`
	// SecretUID is the UID of Revision's Secret. A Secret of that
	// revision written by anyone else has another UID, and opens the
	// lock as any failed revision does.
	SecretUID string `json:"secretUID,omitempty"`
	// Time is when the upgrade failed.
	Time metav1.Time `json:"time"`
}

// MaxFailedUpgradeError bounds FailedUpgrade.Error.
const MaxFailedUpgradeError = 1024

// RenderStatus reports the last render of a release's chart against the
// cluster as it is now. It names paths, never values: a Secret's data
// would otherwise be shown to whoever may read the CR.
type RenderStatus struct {
	// Revision is the verified revision whose chart and values were
	// rendered.
	Revision int `json:"revision"`
	// Cause is what made the render differ, in words, such as "lookup of
	// ConfigMap apps/settings changed"; empty when it renders as stored.
	Cause string `json:"cause,omitempty"`
	// Time is when the render ran.
	Time metav1.Time `json:"time"`
	// Lookups are what the chart's templates looked up, at most
	// MaxRenderLookups of them.
	Lookups []string `json:"lookups,omitempty"`
	// Changes are the objects that would change, at most
	// MaxRenderChanges of them.
	Changes []RenderChange `json:"changes,omitempty"`
	// MoreChanges counts the changed objects left out of Changes.
	MoreChanges int `json:"moreChanges,omitempty"`
	// ChartRevision is the revision of spec.chartRef's artifact the
	// chart was rendered from; empty without a chartRef.
	ChartRevision string `json:"chartRevision,omitempty"`
}

// RenderChange is one object the chart renders differently now.
type RenderChange struct {
	// Object is "Kind namespace/name", or "Kind name" when
	// cluster-scoped, as events name objects.
	Object string `json:"object"`
	// Paths are the JSON pointers that would change, at most
	// MaxRenderPaths of them.
	Paths []string `json:"paths,omitempty"`
	// Added says the chart now renders an object the stored manifest
	// lacks.
	Added bool `json:"added,omitempty"`
	// Removed says the chart no longer renders an object the stored
	// manifest has.
	Removed bool `json:"removed,omitempty"`
}

// The bounds of RenderStatus, so that a chart cannot make its CR's status
// huge.
const (
	MaxRenderChanges = 20
	MaxRenderPaths   = 20
	MaxRenderLookups = 20
	// MaxRenderCause is the longest RenderStatus.Cause, in bytes, as the
	// CRD's schema caps it.
	MaxRenderCause = 1024
)

// LockStatus is what every kind of lock reports of the objects it holds,
// the same way: a HelmRelease of its release's revision, a ManifestLock of
// its manifest.
type LockStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions explain the state: Locked, Drifted, Fighting and Ready.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LockedObjects is how many objects are held.
	LockedObjects int `json:"lockedObjects,omitempty"`
	// NotLocked lists objects that are not held, and why (at most
	// MaxNotLocked of them).
	NotLocked []ObjectProblem `json:"notLocked,omitempty"`
	// LastDrift is the most recent drift seen.
	LastDrift *Drift `json:"lastDrift,omitempty"`
	// DriftsDetected counts the drifts seen over the lock's life.
	DriftsDetected int64 `json:"driftsDetected,omitempty"`
	// DriftsCorrected counts the drifts reverted over the lock's life.
	DriftsCorrected int64 `json:"driftsCorrected,omitempty"`
	// LastDenied is the most recent request Prevent mode denied.
	LastDenied *Denial `json:"lastDenied,omitempty"`
}

// Denial records a request that Prevent mode denied at admission, and who
// sent it: the API server names the requesting user, which a drift found
// afterwards cannot.
type Denial struct {
	// User is the requesting user, as the API server authenticated it.
	User string `json:"user"`
	// Operation is UPDATE, DELETE or CREATE, with /scale for the
	// subresource.
	Operation string `json:"operation"`
	// Object is the object the request was for, as Drift.Object names
	// it.
	Object string `json:"object"`
	// Paths are the declared fields the request would have changed.
	Paths []string `json:"paths,omitempty"`
	// Time is when the request was denied.
	Time metav1.Time `json:"time"`
}

// VerifiedRevision is a revision the locker trusts: it saw Helm apply every
// object of it, or it was the current revision when the lock first
// engaged. A release Secret can be written by anyone who may write Secrets
// in the release namespace; a newer revision is held only as far as Helm is
// seen to have applied it. Kept in the status, it outlives a restart of the
// locker.
type VerifiedRevision struct {
	// Release is the release the revision is of.
	Release ReleaseKey `json:"release"`
	// Revision is the release revision trusted.
	Revision int `json:"revision"`
	// ManifestDigest is the sha256 of the revision's manifest, so that a
	// revision rewritten in place after it was verified is not trusted.
	ManifestDigest string `json:"manifestDigest"`
	// ChartDigest is the sha256 of the revision's chart and user values
	// as Helm stored them, recorded when the revision was verified: a
	// Secret writer can rewrite both in place under an unchanged
	// manifest, and a chart whose digest is not this one is never
	// rendered. Empty in a status an older locker wrote.
	ChartDigest string `json:"chartDigest,omitempty"`
	// Chart, if set, is the older revision whose chart and values are
	// trusted in this one's place: Helm was never seen to apply this
	// revision (no object it changed shows a write of Helm's since its
	// Secret was created), so its Secret's chart, which a Secret writer
	// may have forged, is never rendered. Unset, the revision's own chart
	// is trusted.
	Chart *ChartRevision `json:"chart,omitempty"`
}

// TrustedChart is the revision whose chart and values v trusts: v's own,
// or the older one it names. The locker renders that chart alone, and so
// does `helm-locker diff --rerender` of a locked release.
func (v *VerifiedRevision) TrustedChart() ChartRevision {
	if v.Chart != nil {
		return *v.Chart
	}
	return ChartRevision{Revision: v.Revision, ManifestDigest: v.ManifestDigest, ChartDigest: v.ChartDigest}
}

// ChartRevision names a revision whose chart and values the locker trusts
// to render again (see VerifiedRevision.Chart).
type ChartRevision struct {
	// Revision is the older release revision whose chart and values are
	// trusted.
	Revision int `json:"revision"`
	// ManifestDigest is the sha256 of that revision's manifest, as for
	// VerifiedRevision.ManifestDigest.
	ManifestDigest string `json:"manifestDigest"`
	// ChartDigest is that revision's chart digest, as for
	// VerifiedRevision.ChartDigest.
	ChartDigest string `json:"chartDigest,omitempty"`
}

// MaxNotLocked bounds status.notLocked, so a broken release cannot make its
// status huge.
const MaxNotLocked = 20

// ObjectProblem says why one object is not held.
type ObjectProblem struct {
	// Object is "Kind namespace/name", or "Kind name" when
	// cluster-scoped, as events name objects.
	Object string `json:"object"`
	// Reason is one of OptedOut, GenerateName, TypeNotServed, Conflict,
	// APIError, NotAppliedByHelm, HelmOperationInProgress,
	// WaitingForNamespace, Finished, Unchecked, or a refusal of the API
	// server: TooLarge, Invalid, Immutable, Forbidden, NamespaceNotFound,
	// BadRequest, MethodNotAllowed (see the Reason constants). A tenant's
	// ManifestLock also gives InstalledByHelm, NotMarked, and Forbidden for
	// an object its writer may not adopt (see the ManifestLock API's
	// reasons).
	Reason string `json:"reason"`
	// Message explains the reason to a person.
	Message string `json:"message,omitempty"`
}

// Drift records who changed a locked object, and what.
type Drift struct {
	// Object is "Kind namespace/name", or "Kind name" when
	// cluster-scoped, as events name objects.
	Object string `json:"object"`
	// Paths are the JSON pointers that differed from the manifest.
	Paths []string `json:"paths,omitempty"`
	// Deleted says the object was deleted.
	Deleted bool `json:"deleted,omitempty"`
	// Managers are the field managers that own the drifted fields.
	Managers []FieldManager `json:"managers,omitempty"`
	// Time is when the locker saw the drift.
	Time metav1.Time `json:"time"`
	// Corrected says whether the locker reverted it.
	Corrected bool `json:"corrected"`
}

// FieldManager is one metadata.managedFields entry, as attribution.
type FieldManager struct {
	// Manager is the field manager's name, such as kubectl-edit.
	Manager string `json:"manager"`
	// Operation is Apply or Update, as in the entry.
	Operation string `json:"operation,omitempty"`
	// Time is when the manager last wrote the object, as in the entry.
	Time *metav1.Time `json:"time,omitempty"`
}
