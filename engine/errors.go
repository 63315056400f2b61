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
