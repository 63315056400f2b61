package informers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Stub is the smallest stand-in for an object: namespace, name and
// resourceVersion, what a cache keys and versions objects by. A Registry
// hands an untracked object to its Handler as a *Stub and does not store
// it; callers embed a Stub in stand-ins of their own for tracked objects
// they do not need whole.
//
// Stub implements metav1.Object so caches can key and version it; the
// other getters return zero values and the setters do nothing.
type Stub struct {
	// keyVersion is the object's cache key (namespace/name, or the name
	// of an object of no namespace) then its resourceVersion, in one
	// allocation of their own: strings of a decoded object kept alone
	// would keep the decode's mostly freed spans in use. A Registry's
	// cache is keyed by the key in it (see keyOf), so that a stored stub
	// costs one string, not two.
	keyVersion string
	// nameAt and versionAt are where the name and the resourceVersion
	// start in keyVersion.
	nameAt, versionAt uint32
	// fingerprint is the held fingerprint (see heldFingerprint) of the
	// version of a tracked object this stub stands in for; 0 if unknown.
	fingerprint uint64
}

// stub returns the Stub itself, through any type that embeds it, such as
// what Options.Store returns for an object it need not keep whole.
func (s *Stub) stub() *Stub { return s }

// stubbed is a Stub, or a type that embeds one.
type stubbed interface{ stub() *Stub }

// StatusReader is implemented by what Options.Store returns for an object
// whose status its caller reads, such as a Job that its TTL will delete
// once finished: a change to its status alone is then stored and told like
// any other, where it is otherwise skipped.
type StatusReader interface{ ReadsStatus() bool }

var _ metav1.Object = (*Stub)(nil)

// NewStub returns the stand-in for obj.
func NewStub(obj metav1.Object) *Stub {
	return newStub(obj.GetNamespace(), obj.GetName(), obj.GetResourceVersion())
}

func newStub(namespace, name, resourceVersion string) *Stub {
	if namespace == "" {
		return &Stub{keyVersion: name + resourceVersion, versionAt: uint32(len(name))}
	}
	nameAt := len(namespace) + 1
	return &Stub{keyVersion: namespace + "/" + name + resourceVersion, nameAt: uint32(nameAt), versionAt: uint32(nameAt + len(name))}
}

// key is the stub's cache key, as cache.MetaNamespaceKeyFunc makes it.
func (s *Stub) key() string { return s.keyVersion[:s.versionAt] }

func (s *Stub) GetNamespace() string {
	if s.nameAt == 0 {
		return ""
	}
	return s.keyVersion[:s.nameAt-1]
}
func (s *Stub) GetName() string                               { return s.keyVersion[s.nameAt:s.versionAt] }
func (s *Stub) GetResourceVersion() string                    { return s.keyVersion[s.versionAt:] }
func (s *Stub) GetGenerateName() string                       { return "" }
func (s *Stub) GetUID() types.UID                             { return "" }
func (s *Stub) GetGeneration() int64                          { return 0 }
func (s *Stub) GetSelfLink() string                           { return "" }
func (s *Stub) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (s *Stub) GetDeletionTimestamp() *metav1.Time            { return nil }
func (s *Stub) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (s *Stub) GetLabels() map[string]string                  { return nil }
func (s *Stub) GetAnnotations() map[string]string             { return nil }
func (s *Stub) GetFinalizers() []string                       { return nil }
func (s *Stub) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (s *Stub) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

func (s *Stub) SetNamespace(string)                          {}
func (s *Stub) SetName(string)                               {}
func (s *Stub) SetGenerateName(string)                       {}
func (s *Stub) SetUID(types.UID)                             {}
func (s *Stub) SetResourceVersion(string)                    {}
func (s *Stub) SetGeneration(int64)                          {}
func (s *Stub) SetSelfLink(string)                           {}
func (s *Stub) SetCreationTimestamp(metav1.Time)             {}
func (s *Stub) SetDeletionTimestamp(*metav1.Time)            {}
func (s *Stub) SetDeletionGracePeriodSeconds(*int64)         {}
func (s *Stub) SetLabels(map[string]string)                  {}
func (s *Stub) SetAnnotations(map[string]string)             {}
func (s *Stub) SetFinalizers([]string)                       {}
func (s *Stub) SetOwnerReferences([]metav1.OwnerReference)   {}
func (s *Stub) SetManagedFields([]metav1.ManagedFieldsEntry) {}
