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
type HelmRelease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   HelmReleaseSpec   `json:"spec"`
	Status HelmReleaseStatus `json:"status,omitempty"`
}

// HelmReleaseSpec names the release.
type HelmReleaseSpec struct {
	Release ReleaseKey `json:"release"`
}

// ReleaseKey identifies a Helm release by name and namespace, as `helm -n`
// does.
type ReleaseKey struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// State is the summary a user reads in `kubectl get helmreleases`. The
// values are rancher/helm-locker's, so dashboards built on it keep working.
type State string

// The states. Deployed is reported only once every object of the locked
// revision has been checked and brought in line.
const (
	StateDeployed       State = "Deployed"
	StateTransitioning  State = "Transitioning"
	StateFailed         State = "Failed"
	StateUninstalled    State = "Uninstalled"
	StateSecretNotFound State = "SecretNotFound"
	StateError          State = "Error"
	StateUnknown        State = "Unknown"
)

// ConditionLocked is True once every object of the locked revision has been
// checked and corrected, and False, with a reason, whenever the lock is open.
const ConditionLocked = "Locked"

// HelmReleaseStatus reports what the locker knows of the release.
type HelmReleaseStatus struct {
	// State summarises the release and the lock.
	State State `json:"state,omitempty"`
	// Version is the release revision that is locked.
	Version int `json:"version,omitempty"`
	// Description is the release's own description of its last action.
	Description string `json:"description,omitempty"`
	// Notes are the rendered NOTES.txt of the release.
	Notes string `json:"notes,omitempty"`
	// ObservedGeneration is the generation of the spec this status is for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions explain the state; see ConditionLocked.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
