package engine

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ObjectError is a failure to check or correct one object.
type ObjectError struct {
	Ref ObjectRef
	Err error
}

func (e *ObjectError) Error() string { return fmt.Sprintf("%s: %v", e.Ref, e.Err) }

func (e *ObjectError) Unwrap() error { return e.Err }

// TypeError says a declared object's kind is not served by the API server,
// usually because its CRD does not exist or is not yet established. The
// engine retries such objects whenever a CRD changes.
type TypeError struct {
	Kind schema.GroupVersionKind
	Name string
	Err  error
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("%s %s: kind not served by the API server: %v", e.Kind.GroupVersion().String()+", Kind="+e.Kind.Kind, e.Name, e.Err)
}

func (e *TypeError) Unwrap() error { return e.Err }

// ConflictError says Locker.Lock or Set.Update was refused because another
// set of the same Locker holds one of the objects: one object is held by one
// set, or the two would take turns writing it.
type ConflictError struct {
	Ref    ObjectRef
	Holder string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: already held by set %s; one object is held by one set", e.Ref, e.Holder)
}
