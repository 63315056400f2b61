package engine

import (
	"fmt"
	"time"
)

// Unchecked is a declared object whose live copy differs from its
// declaration where the engine cannot tell drift from the form the API
// server stores the declaration in. A value the server defaults inside an
// atomic list (a webhook rule's scope) or writes in another form (a
// quantity) differs from the declaration as given; a dry run of the
// correction says how the server would store it (see canonicalize). When
// every identity that could make that dry run is refused it, Forbidden,
// as the set's Writer and then as the engine's own, or as the engine's
// own for a set with no Writer, the difference may be either. Under a
// least-privilege RBAC, where the locker itself writes nothing and its
// writer may not write a cluster-scoped object, that is every mismatch of
// such an object.
//
// An unchecked object is no Drift: it is not counted in Result.Drifted,
// nothing is written to it (the write would be refused as the dry run
// was), and it is not in line either, so the set is not InLine. The dry
// run is tried again after UncheckedRetry (Result.RequeueAfter asks for a
// Sync then): what it needs is a grant, which no event of the object
// shows. Meanwhile each check of the object compares it again without a
// dry run; it is checked as usual once it comes in line as declared, or
// is deleted, or its declaration changes.
type Unchecked struct {
	Ref  ObjectRef
	Kind string
	// Paths are where the live object differs from the declaration as
	// given, named as in Drift.Paths: the server's form, drift, or both.
	Paths []string
	// Err is the API server's refusal of the dry run: the Writer's, then
	// the engine's own, when the set has a Writer.
	Err error
	// RetryAt is when the dry run is tried again.
	RetryAt time.Time
}

// UncheckedRetry is how long the engine waits before it dry-runs an
// unchecked object again. A refusal changes with RBAC, not with the
// object, so the object's own events are no reason to try sooner; a
// minute, as for a Failure, bounds an unchecked object to two refused dry
// runs a minute, and a grant is seen within one.
const UncheckedRetry = PermanentRetry

// dryRunRefusal is the refusal of canonicalize's dry runs: err, the last,
// after refused, the Writer's, when the engine tried again as its own.
func dryRunRefusal(refused, err error) error {
	if refused == nil || refused == err {
		return err
	}
	return fmt.Errorf("%w; as the engine's own identity: %w", refused, err)
}

// unchecked returns what was recorded of obj being unchecked, nil when it
// is not.
func (o *lockedObject) unchecked() *Unchecked {
	if o.drift == nil {
		return nil
	}
	return o.drift.unchecked
}

// markUnchecked records u as why obj could not be checked, or with nil
// that it could. An unchecked object is not known to differ: what was
// recorded of a drift or a refused correction of it stands no more.
func (o *lockedObject) markUnchecked(u *Unchecked) {
	if u == nil {
		if o.drift != nil {
			o.drift.unchecked = nil
		}
		return
	}
	d := o.drifts()
	d.unchecked = u
	d.drifted, d.failure = false, nil
}
