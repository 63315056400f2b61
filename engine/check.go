package engine

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// syncObject brings one object in line, and returns the drift it found, if
// any. obj.inLine says whether the object is in line afterwards; only the
// goroutine syncing obj's set writes obj. It reads in four steps: classify
// what the event left (observe), recreate what is gone, compare the live
// object with its declaration, and revert what differs.
func (e *Engine) syncObject(ctx context.Context, s *objectSet, obj *lockedObject, reads readAhead) (*Drift, error) {
	o, err := e.observe(ctx, obj, reads)
	if err != nil || o.settled {
		return nil, err
	}
	if o.live == nil {
		obj.markUnchecked(nil)
		return e.recreate(ctx, s, obj, o.declared)
	}
	c, err := e.compare(ctx, s.spec, obj, o)
	if err != nil {
		return nil, err
	}
	obj.markUnchecked(c.unchecked)
	if c.unchecked != nil {
		return nil, nil
	}
	if c.patch == nil {
		if !s.spec.ReportOnly {
			if err := e.handOver(ctx, s.spec, obj, o.live); err != nil {
				return nil, err
			}
		}
		e.proved(s, obj, o.live)
		obj.settle()
		return nil, nil
	}
	return e.revert(ctx, s, obj, o.live, o.declared, c)
}

// observed is what observe found of a locked object.
type observed struct {
	// settled is set when nothing is left to do: the object is in line,
	// is a version the engine's own write replaced, or is a finished Job
	// its TTL deleted.
	settled bool
	// live is the object as it is, nil when it does not exist.
	live     *unstructured.Unstructured
	declared *unstructured.Unstructured
	// fresh is set when the object may not have been compared since its
	// declaration or the last write (see lockedObject.fresh).
	fresh bool
}

// observe reads obj as it is and classifies it.
func (e *Engine) observe(ctx context.Context, obj *lockedObject, reads readAhead) (observed, error) {
	obj.inLine = false
	live, inLine, err := e.live(ctx, obj, reads)
	o := observed{fresh: obj.fresh}
	if err == nil {
		obj.fresh = false
	}
	if inLine {
		obj.settle()
		return observed{settled: true}, nil
	}
	notFound := apierrors.IsNotFound(err)
	if err != nil && !notFound {
		return o, err
	}
	if !notFound {
		if rv := live.GetResourceVersion(); rv != "" && obj.superseded(rv) {
			obj.settle()
			return observed{settled: true}, nil
		}
	}
	if o.declared, err = obj.declaration(); err != nil {
		return o, err
	}
	if notFound && obj.flag(flagFinished) {
		// Its TTL deleted it, as Kubernetes is meant to.
		obj.expired = true
		return observed{settled: true}, nil
	}
	obj.expired = false
	if !notFound {
		obj.setFlag(flagFinished, finishedWithTTL(live))
		o.live = live
	}
	return o, nil
}

// recreate creates a locked object that does not exist.
func (e *Engine) recreate(ctx context.Context, s *objectSet, obj *lockedObject, declared *unstructured.Unstructured) (*Drift, error) {
	if obj.proof != nil {
		// Only the owner creates what it declares; what the last
		// verified declaration had is recreated as it had it.
		obj.proof.missing()
		return e.holdFallback(ctx, s, obj, nil)
	}
	drift := &Drift{Ref: obj.ref(), Kind: kindOf(declared), Deleted: true, Applying: obj.applying}
	return drift, e.correct(ctx, s, obj, drift, "", func() error { return e.create(ctx, s.spec, obj, declared) })
}

// comparison is how a live object differs from its declaration.
type comparison struct {
	rules   mergeRules
	desired map[string]any
	// patch makes live desired; nil when it is in line.
	patch *mergePatch
	// refused is the API server's refusal of the correction in the dry
	// run canonicalize made: the write would get it too, so it is not
	// sent.
	refused error
	// unchecked is set when the API server refused every dry run that
	// would tell the mismatch from its own form: it is neither reported
	// nor written (see Unchecked).
	unchecked *Unchecked
}

// paths lists where live differs from c.desired (see driftPaths), at most
// maxDriftPaths of them.
func (c comparison) paths(live *unstructured.Unstructured) []string {
	return limitPaths(c.rules.kindOf(c.desired).driftPaths(live.Object, c.desired))
}

// compare works out what o.live should be, and the patch that makes it so.
func (e *Engine) compare(ctx context.Context, spec ObjectSet, obj *lockedObject, o observed) (comparison, error) {
	rules, changes := e.schemas.rulesAt(obj.ref().GVR.GroupVersion())
	fresh := o.fresh
	if changes != obj.rulesSeen {
		obj.rulesSeen = changes
		fresh, obj.canonical = true, false
	}
	live, declared := o.live, o.declared
	c := comparison{rules: rules}
	if rules.holds(live.Object, declared.Object) {
		return c, nil
	}
	var err error
	if c.desired, err = obj.desired(rules, live.Object, declared.Object); err != nil {
		return c, err
	}
	if c.patch, err = computePatch(live.Object, c.desired); err != nil {
		return c, err
	}
	// A mismatch where the declaration may just be in another form than
	// the stored one is dry-run once, and again while every dry run is
	// refused (see Unchecked); an unverified object's is, by the dry run
	// its verification makes.
	if c.patch != nil && (fresh || obj.unchecked() != nil) && !obj.canonical && obj.proof == nil {
		if err := e.learnStoredForm(ctx, spec, obj, live, declared, &c); err != nil || c.unchecked != nil {
			return c, err
		}
	}
	if c.patch != nil && obj.noop(live.GetResourceVersion(), string(c.patch.Data)) {
		c.patch = nil
	}
	return c, nil
}

// learnStoredForm dry-runs c's patch to put obj's declaration in the form
// the API server stores it (see canonicalize), and compares live with it
// again. When every dry run is refused it sets c.unchecked instead, and
// leaves the next try to a check after UncheckedRetry.
func (e *Engine) learnStoredForm(ctx context.Context, spec ObjectSet, obj *lockedObject, live, declared *unstructured.Unstructured, c *comparison) error {
	now := e.now()
	if u := obj.unchecked(); u != nil && now.Before(u.RetryAt) {
		again := *u
		again.Paths = c.paths(live)
		c.unchecked = &again
		return nil
	}
	obj.canonical = true
	canon, refused, err := e.canonicalize(ctx, spec, obj, c.rules, declared, c.patch)
	if permanentReason(err) == ReasonForbidden {
		// Nothing learnt: the first check after RetryAt dry-runs
		// again.
		obj.canonical = false
		c.unchecked = &Unchecked{Ref: obj.ref(), Kind: kindOf(declared), Paths: c.paths(live), Err: dryRunRefusal(refused, err), RetryAt: now.Add(UncheckedRetry)}
		return nil
	}
	c.refused = refused
	if err != nil {
		// Compared in the declared form, as ever: the correction
		// meets the same error, or a form-only one changes nothing
		// and is remembered as such (see noopPatch).
		return nil
	}
	if c.desired, err = obj.desired(c.rules, live.Object, canon.Object); err != nil {
		return err
	}
	c.patch, err = computePatch(live.Object, c.desired)
	return err
}

// revert writes c's patch to obj, once the drift is verified as someone
// else's (see Verification) and unless the set only reports.
func (e *Engine) revert(ctx context.Context, s *objectSet, obj *lockedObject, live, declared *unstructured.Unstructured, c comparison) (*Drift, error) {
	spec := s.spec
	if obj.proof != nil {
		verified, err := e.verify(ctx, s, obj, live, c.desired, c.patch)
		if err != nil || obj.inLine {
			return nil, err
		}
		if !verified {
			return e.holdFallback(ctx, s, obj, live)
		}
	}
	k := c.rules.kindOf(c.desired)
	paths := k.driftPaths(live.Object, c.desired)
	drift := &Drift{Ref: obj.ref(), Kind: kindOf(declared), Paths: paths, Managers: attribute(live, k, paths, e.fieldManager), Applying: obj.applying}
	return drift, e.correct(ctx, s, obj, drift, live.GetResourceVersion(), func() error {
		if spec.BeforeWrite != nil {
			if err := spec.BeforeWrite(ctx, Write{Ref: obj.ref(), Live: live, Restores: restores(live.Object, c.desired, paths)}); err != nil {
				return err
			}
		}
		if c.refused != nil {
			return shortRefusal("patching", c.refused)
		}
		out, err := e.writer(spec, obj.ref()).Patch(ctx, obj.ref().Name, c.patch.Type, c.patch.Data, metav1.PatchOptions{FieldManager: e.fieldManager})
		if err != nil {
			return shortRefusal("patching", err)
		}
		if rv := live.GetResourceVersion(); rv != "" && out.GetResourceVersion() == rv {
			obj.writes().noop = &noopPatch{resourceVersion: live.GetResourceVersion(), data: string(c.patch.Data)}
		}
		drift.Paths = k.storedKeys(drift.Paths, out.Object)
		obj.writes().superseded = []string{live.GetResourceVersion()}
		obj.fresh = true
		return e.handOver(ctx, spec, obj, out)
	})
}
