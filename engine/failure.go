package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PermanentRetry is how long the engine waits before it writes an object
// again after the API server refused the write for a reason that a retry
// alone cannot change (see Failure).
const PermanentRetry = time.Minute

// The reasons of a Failure.
const (
	// ReasonTooLarge: the object is larger than the API server accepts.
	ReasonTooLarge = "TooLarge"
	// ReasonInvalid: the API server's validation rejects the object.
	ReasonInvalid = "Invalid"
	// ReasonImmutable: the correction changes a field that cannot change
	// once set, such as a Job's template or a PersistentVolumeClaim's
	// storage class; only recreating the object could.
	ReasonImmutable = "Immutable"
	// ReasonForbidden: the identity the engine writes as may not write it.
	ReasonForbidden = "Forbidden"
	// ReasonNamespaceNotFound: the object's namespace does not exist.
	ReasonNamespaceNotFound = "NamespaceNotFound"
	// ReasonBadRequest: the API server cannot read the request.
	ReasonBadRequest = "BadRequest"
	// ReasonMethodNotAllowed: the resource does not take the write.
	ReasonMethodNotAllowed = "MethodNotAllowed"
)

// Failure is an object whose correction the API server refused for a
// reason that retrying the same write cannot change: the object is invalid
// or too large, its namespace is missing, or the engine may not write it.
// Such a write is reported once and tried again at most every
// PermanentRetry, never in a loop. Transient errors (conflicts, throttling,
// timeouts, server errors) are returned by Sync instead, for the caller to
// retry with its own backoff.
type Failure struct {
	Ref  ObjectRef
	Kind string
	// Reason is one of the Reason constants.
	Reason string
	Err    error
	// RetryAt is when the write is tried again.
	RetryAt time.Time
}

// permanentReason returns the Failure reason of err, or "" if a retry may
// succeed.
func permanentReason(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ""
	}
	switch {
	case apierrors.IsRequestEntityTooLargeError(err):
		return ReasonTooLarge
	case apierrors.IsInvalid(err):
		if immutable(status.Status()) {
			return ReasonImmutable
		}
		return ReasonInvalid
	case crdTerminating(err):
		// Not the engine's identity: the type goes away, and may come
		// back, as when its CRD is deleted and recreated.
		return ""
	case apierrors.IsForbidden(err):
		return ReasonForbidden
	case apierrors.IsNotFound(err):
		// A write that finds no object races a delete, whose event
		// follows; a missing namespace does not fix itself.
		if d := status.Status().Details; d != nil && d.Kind == "namespaces" {
			return ReasonNamespaceNotFound
		}
	case apierrors.IsBadRequest(err):
		return ReasonBadRequest
	case apierrors.IsMethodNotSupported(err):
		return ReasonMethodNotAllowed
	}
	return ""
}

// crdTerminating reports whether err is the API server refusing to create
// a custom resource because its CRD is being deleted. From the moment the
// CRD's finalizer (customresourcecleanup.apiextensions.k8s.io) marks it
// Terminating until the CRD is gone, apiextensions-apiserver answers every
// create with 403 Forbidden "create not allowed while custom resource
// definition is terminating" (forbidCreateAdmission in
// k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go).
// A custom resource deleted by that finalizer is seen deleted within that
// window, so its first re-creation meets this refusal: it says nothing
// about the engine's permissions, and holding the object back for
// PermanentRetry would leave it missing for a minute after the CRD is back.
func crdTerminating(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "while custom resource definition is terminating")
}

// refusal is an Invalid or Immutable refusal told in one line: each field
// and what is wrong with it. The API server's message repeats the value it
// refused, and for a Job's template that is a struct dump of kilobytes.
// Unwrap gives the API server's error whole.
type refusal struct {
	summary string
	err     error
}

func (r *refusal) Error() string { return r.summary }
func (r *refusal) Unwrap() error { return r.err }

// shortRefusal returns the error of write op: err told in one line if the
// API server refused it as invalid, naming each field and the reason
// without the value.
func shortRefusal(op string, err error) error {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return fmt.Errorf("%s: %w", op, err)
	}
	d := status.Status().Details
	if d == nil || len(d.Causes) == 0 {
		return fmt.Errorf("%s: %w", op, err)
	}
	var parts []string
	for _, c := range d.Causes {
		msg := c.Message
		if rest, ok := strings.CutPrefix(msg, "Invalid value: "); ok {
			// "Invalid value: <value>: <reason>"; the value is what the
			// request said.
			if i := strings.LastIndex(rest, ": "); i >= 0 {
				msg = rest[i+2:]
			}
		}
		if c.Field != "" {
			msg = c.Field + ": " + msg
		}
		if !slices.Contains(parts, msg) {
			parts = append(parts, msg)
		}
	}
	return &refusal{summary: fmt.Sprintf("%s: %s %s is invalid: %s", op, d.Kind, d.Name, strings.Join(parts, "; ")), err: err}
}

// immutable reports whether a 422 names a field that may not change: the
// API server's validation says "field is immutable" for each.
func immutable(status metav1.Status) bool {
	if d := status.Details; d != nil {
		for _, c := range d.Causes {
			if strings.Contains(c.Message, "field is immutable") {
				return true
			}
		}
	}
	return strings.Contains(status.Message, "field is immutable")
}
