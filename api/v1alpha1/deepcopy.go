package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeepCopy returns a copy that shares nothing with s, so a controller can
// build a new status from the cached one without changing the cache.
func (s *HelmReleaseStatus) DeepCopy() *HelmReleaseStatus {
	if s == nil {
		return nil
	}
	out := *s
	if s.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(s.Conditions))
		for i := range s.Conditions {
			s.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	return &out
}
