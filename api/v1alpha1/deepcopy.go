package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeepCopy returns a copy that shares nothing with s, so a controller can
// build a new status from the cached one without changing the cache.
func (s *HelmReleaseStatus) DeepCopy() *HelmReleaseStatus {
	if s == nil {
		return nil
	}
	out := *s
	out.LockStatus = s.LockStatus.DeepCopy()
	if s.Verified != nil {
		v := *s.Verified
		if v.Chart != nil {
			chart := *v.Chart
			v.Chart = &chart
		}
		out.Verified = &v
	}
	out.Rerender = s.Rerender.DeepCopy()
	if s.FailedUpgrade != nil {
		f := *s.FailedUpgrade
		out.FailedUpgrade = &f
	}
	return &out
}

// DeepCopy returns a copy of r that shares nothing with it.
func (r *ChartReference) DeepCopy() *ChartReference {
	if r == nil {
		return nil
	}
	out := *r
	return &out
}

// DeepCopy returns a copy of r that shares nothing with it.
func (r *RenderStatus) DeepCopy() *RenderStatus {
	if r == nil {
		return nil
	}
	out := *r
	out.Lookups = slices.Clone(r.Lookups)
	if r.Changes != nil {
		out.Changes = make([]RenderChange, len(r.Changes))
		for i, c := range r.Changes {
			out.Changes[i] = c
			out.Changes[i].Paths = slices.Clone(c.Paths)
		}
	}
	return &out
}

// DeepCopy returns a copy of d that shares nothing with it.
func (d *Drift) DeepCopy() *Drift {
	if d == nil {
		return nil
	}
	out := *d
	out.Paths = slices.Clone(d.Paths)
	if d.Managers != nil {
		out.Managers = make([]FieldManager, len(d.Managers))
		for i, m := range d.Managers {
			out.Managers[i] = m
			if m.Time != nil {
				out.Managers[i].Time = m.Time.DeepCopy()
			}
		}
	}
	return &out
}

// DeepCopy returns a copy of h that shares nothing with it, so that a CR
// read from a cache can be changed without changing the cache.
func (h *HelmRelease) DeepCopy() *HelmRelease {
	if h == nil {
		return nil
	}
	out := &HelmRelease{TypeMeta: h.TypeMeta, Spec: h.Spec, Status: *h.Status.DeepCopy()}
	h.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.ChartRef = h.Spec.ChartRef.DeepCopy()
	if h.Spec.Ignore != nil {
		out.Spec.Ignore = make([]IgnoreRule, len(h.Spec.Ignore))
		for i, r := range h.Spec.Ignore {
			out.Spec.Ignore[i] = r.DeepCopy()
		}
	}
	return out
}

// DeepCopy returns a copy of r that shares nothing with it.
func (r IgnoreRule) DeepCopy() IgnoreRule {
	out := IgnoreRule{Paths: slices.Clone(r.Paths)}
	if r.Target != nil {
		t := *r.Target
		out.Target = &t
	}
	return out
}

// DeepCopy returns a copy of s that shares nothing with it.
func (s LockStatus) DeepCopy() LockStatus {
	out := s
	if s.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(s.Conditions))
		for i := range s.Conditions {
			s.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	out.NotLocked = slices.Clone(s.NotLocked)
	out.LastDrift = s.LastDrift.DeepCopy()
	out.LastDenied = s.LastDenied.DeepCopy()
	return out
}

// DeepCopy returns a copy of d that shares nothing with it.
func (d *Denial) DeepCopy() *Denial {
	if d == nil {
		return nil
	}
	out := *d
	out.Paths = slices.Clone(d.Paths)
	return &out
}
