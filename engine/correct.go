package engine

import (
	"cmp"
	"context"
	"fmt"
	"time"
	"unique"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
)

// correct runs write for a drift unless the set only reports, or a fight
// holds the object back. version is the drifted resourceVersion ("" for a
// deleted object): a drift already reported at that version, while it
// stays uncorrected, is not reported again.
func (e *Engine) correct(ctx context.Context, s *objectSet, obj *lockedObject, drift *Drift, version string, write func() error) error {
	spec := s.spec
	now := e.now()
	d := obj.drifts()
	seen := d.drifted && d.version == version
	d.drifted, d.version = true, version
	if d.fight != nil && now.Before(d.fight.Until) {
		drift.Held = true
		return nil
	}
	if spec.ReportOnly {
		if seen {
			drift.Held = true
			return nil
		}
		e.countDrift(d, drift, now)
		return nil
	}
	if f := d.failure; f != nil && now.Before(f.RetryAt) {
		drift.Held = true
		return nil
	}
	declaresType := s.kinds[schema.GroupKind{Group: obj.ref().GVR.Group, Kind: drift.Kind}]
	if version == "" && declaresType && e.deletedCRDs.has(obj.ref().GVR.GroupResource()) {
		// Not sent: it could slip past the API server's refusal
		// (see deletedCRDs).
		return errTypeWaiting
	}
	if err := write(); err != nil {
		reason := permanentReason(err)
		if reason == ReasonNamespaceNotFound && s.namespaces[obj.ref().Namespace] {
			// The set's own Namespace is on its way.
			return errNamespaceWaiting
		}
		if version == "" && reason == "" && (apierrors.IsNotFound(err) || crdTerminating(err)) && declaresType {
			return errTypeWaiting
		}
		if reason == "" {
			d.failure = nil
			return err
		}
		// Reported once: a retry that fails alike is held, not
		// reported again.
		again := d.failure != nil && d.failure.Reason == reason && d.failure.Err.Error() == err.Error()
		d.failure = &Failure{Ref: obj.ref(), Kind: drift.Kind, Reason: reason, Err: err, RetryAt: now.Add(PermanentRetry)}
		if again {
			drift.Held = true
			return nil
		}
		drift.Err = err
		return nil
	}
	d.failure = nil
	if obj.proof == nil {
		// An unverified object held at its fallback is not in line.
		obj.settle()
	}
	drift.Corrected = true
	e.countDrift(d, drift, now)
	return nil
}

// countDrift records a reported drift at now. Past FightThreshold drifts
// within FightWindow, or while a fight is under way, it holds the object's
// next correction back, doubling the wait each time up to MaxFightBackoff,
// so the writes to one object are bounded whatever another actor does. A
// fight is over once the object stays alone for FightWindow after a hold.
func (e *Engine) countDrift(d *driftState, drift *Drift, now time.Time) {
	if d.fight != nil && now.Sub(d.fight.Until) > e.opts.FightWindow {
		d.fight, d.backoff = nil, 0
	}
	kept := d.times[:0]
	for _, t := range d.times {
		if now.Sub(t) < e.opts.FightWindow {
			kept = append(kept, t)
		}
	}
	d.times = append(kept, now)
	if d.fight == nil && len(d.times) <= e.opts.FightThreshold {
		return
	}
	if d.backoff == 0 {
		d.backoff = e.opts.FightBackoff
	} else {
		d.backoff = min(2*d.backoff, e.opts.MaxFightBackoff)
	}
	managers := drift.Managers
	if d.fight != nil && len(managers) == 0 {
		managers = d.fight.Managers
	}
	d.fight = &Fight{Ref: drift.Ref, Kind: drift.Kind, Managers: managers, Paths: drift.Paths, Until: now.Add(d.backoff)}
}

// create recreates a deleted object from its declaration. For a set owned
// by a server-side-apply manager it applies as that manager, so that the
// owner's next apply finds every field its own.
func (e *Engine) create(ctx context.Context, spec ObjectSet, obj *lockedObject, declared *unstructured.Unstructured) error {
	if spec.BeforeWrite != nil {
		if err := spec.BeforeWrite(ctx, Write{Ref: obj.ref(), Restores: true}); err != nil {
			return err
		}
	}
	var err error
	if spec.ApplyManager != "" {
		_, err = e.writer(spec, obj.ref()).Apply(ctx, obj.ref().Name, declared, metav1.ApplyOptions{FieldManager: obj.applyManagerOr(spec.ApplyManager), Force: true})
	} else {
		_, err = e.writer(spec, obj.ref()).Create(ctx, declared, metav1.CreateOptions{FieldManager: e.fieldManager})
	}
	if err != nil {
		// AlreadyExists means the cache was behind; the event that
		// brings it up to date marks the object dirty again.
		return shortRefusal("creating", err)
	}
	obj.fresh = true
	return nil
}

// handOver moves ownership of the fields the engine wrote to the set's
// server-side-apply manager, with a JSON patch of managedFields alone (see
// ObjectSet.ApplyManager). The patch carries the resourceVersion, so it
// fails rather than overwrite a concurrent change; the event of that change
// brings the object back to Sync.
func (e *Engine) handOver(ctx context.Context, spec ObjectSet, obj *lockedObject, live *unstructured.Unstructured) error {
	if spec.ApplyManager == "" {
		return nil
	}
	if m := applyManagerOf(live, e.fieldManager, spec.ApplyManager); m != "" {
		obj.applyManager = unique.Make(m)
	}
	if !hasUpdateEntry(live, e.fieldManager) {
		return nil
	}
	manager := obj.applyManagerOr(spec.ApplyManager)
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(e.fieldManager), manager)
	if err != nil || patch == nil {
		return err
	}
	_, err = e.writer(spec, obj.ref()).Patch(ctx, obj.ref().Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: e.fieldManager})
	switch {
	case apierrors.IsConflict(err):
		// Someone wrote since live was read; the event of that write
		// brings the object back, and the hand-over is retried then.
		return nil
	case err != nil:
		return fmt.Errorf("handing fields over to field manager %q: %w", manager, err)
	}
	// live is now older than the object the hand-over wrote.
	w := obj.writes()
	w.superseded = append(w.superseded, live.GetResourceVersion())
	return nil
}

// hasUpdateEntry reports whether manager has an Update entry on obj.
func hasUpdateEntry(obj *unstructured.Unstructured, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationUpdate {
			return true
		}
	}
	return false
}

// applyManagerOf returns the Apply field manager of obj other than own,
// preferring preferred when there are several.
func applyManagerOf(obj *unstructured.Unstructured, own, preferred string) string {
	found := ""
	for _, f := range obj.GetManagedFields() {
		if f.Operation != metav1.ManagedFieldsOperationApply || f.Subresource != "" || f.Manager == own {
			continue
		}
		if f.Manager == preferred {
			return f.Manager
		}
		if found == "" {
			found = f.Manager
		}
	}
	return found
}

// applyManagerOr returns the Apply field manager last seen on the object,
// or the set's if none was.
func (o *lockedObject) applyManagerOr(set string) string {
	return cmp.Or(o.manager(), set)
}

// restores reports whether desired has, at one of the drifted paths, a
// field live lacks, or a list with more entries.
func restores(live, desired map[string]any, paths []string) bool {
	for _, text := range paths {
		p, err := ParsePointer(text)
		if err != nil {
			continue
		}
		lv, inLive := p.get(live)
		dv, inDesired := p.get(desired)
		if !inLive && inDesired {
			return true
		}
		ll, ok1 := lv.([]any)
		dl, ok2 := dv.([]any)
		if ok1 && ok2 && len(dl) > len(ll) {
			return true
		}
	}
	return false
}
