package v1alpha1

import (
	"slices"

	helmv1 "github.com/helm-locker/helm-locker/api/v1alpha1"
)

// DeepCopy returns a copy that shares nothing with s, so a controller can
// build a new status from the cached one without changing the cache.
func (s *ManifestLockStatus) DeepCopy() *ManifestLockStatus {
	if s == nil {
		return nil
	}
	out := *s
	out.LockStatus = s.LockStatus.DeepCopy()
	out.Inventory = slices.Clone(s.Inventory)
	return &out
}

// DeepCopy returns a copy that shares nothing with l.
func (l *ManifestLock) DeepCopy() *ManifestLock {
	if l == nil {
		return nil
	}
	out := *l
	l.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if f := l.Spec.ManifestFrom; f != nil {
		from := *f
		if f.ConfigMapRef != nil {
			r := *f.ConfigMapRef
			from.ConfigMapRef = &r
		}
		if f.SecretRef != nil {
			r := *f.SecretRef
			from.SecretRef = &r
		}
		out.Spec.ManifestFrom = &from
	}
	if r := l.Spec.SourceRef; r != nil {
		ref := *r
		out.Spec.SourceRef = &ref
	}
	if l.Spec.Ignore != nil {
		out.Spec.Ignore = make([]helmv1.IgnoreRule, len(l.Spec.Ignore))
		for i, r := range l.Spec.Ignore {
			out.Spec.Ignore[i] = r.DeepCopy()
		}
	}
	out.Status = *l.Status.DeepCopy()
	return &out
}
