package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/lock"
)

// openStatus is the status of a CR whose lock is open.
func openStatus(hr *v1alpha1.HelmRelease, state v1alpha1.State, revision int, reason, message string) v1alpha1.HelmReleaseStatus {
	s := *hr.Status.DeepCopy()
	s.State = state
	s.Version = revision
	s.Description = message
	openLock(&s.LockStatus, hr.Generation, reason, message)
	return s
}

// openLock sets what every kind of lock reports while it holds nothing.
func openLock(s *v1alpha1.LockStatus, generation int64, reason, message string) {
	s.ObservedGeneration = generation
	s.LockedObjects, s.NotLocked = 0, nil
	setConditions(s, generation,
		condition(v1alpha1.ConditionLocked, false, reason, message),
		metav1.Condition{Type: v1alpha1.ConditionDrifted, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonLockOpen, Message: "drift is not looked for while the lock is open"},
		condition(v1alpha1.ConditionFighting, false, v1alpha1.ReasonLockOpen, ""),
		condition(v1alpha1.ConditionReady, false, reason, message),
	)
}

// lockedStatus is the status of a CR whose release is deployed. It says
// Deployed and Locked=True only once the lock has settled: every object of
// the revision checked and in line. In Warn mode it says Deployed once
// every object has been checked, and Locked stays False.
func lockedStatus(hr *v1alpha1.HelmRelease, st *releaseState, res engine.Result, syncErr error) v1alpha1.HelmReleaseStatus {
	s := *hr.Status.DeepCopy()
	s.Version = st.rel.Version
	if st.rel.Info != nil {
		s.Description = st.rel.Info.Description
		s.Notes = st.rel.Info.Notes
	}
	s.State = v1alpha1.StateTransitioning
	if st.lock.Holding() {
		s.State = v1alpha1.StateDeployed
	}
	if len(res.Unwatched) > 0 && hr.Status.State == v1alpha1.StateDeployed && hr.Status.Version == st.rel.Version {
		// The release is as deployed as it was; Locked says what the
		// lock can no longer tell.
		s.State = v1alpha1.StateDeployed
	}
	unverified := ""
	if len(res.Unverified) > 0 {
		unverified = limit(fmt.Sprintf("%d of %d objects of revision %d are not held: Helm was not seen to apply them. %s",
			len(res.Unverified), res.Objects, st.rel.Version, unverifiedMessage(st.rel.Version, res.Unverified[0])))
	}
	heldLock(&s.LockStatus, hr.Generation, heldReport{lock: st.lock, settled: s.State == v1alpha1.StateDeployed, res: res, syncErr: syncErr,
		of: fmt.Sprintf("of revision %d", st.rel.Version), unverified: unverified})
	s.NotLocked = notLocked(st.optedOut, st.rel.Version, res, syncErr)
	return s
}

// heldReport is what heldLock reports of a lock after a sync, whatever its
// kind.
type heldReport struct {
	lock lock.Lock
	// settled says the status reports the lock as settled.
	settled bool
	// res and syncErr are the sync's (see afterSync).
	res     engine.Result
	syncErr error
	// of names the objects in messages ("of revision 3").
	of string
	// unverified, if set, says why objects are held back (see
	// engine.Verification).
	unverified string
}

// heldLock sets what every kind of lock reports of the objects it holds,
// after a sync: the objects held, and the Locked, Drifted, Fighting and
// Ready conditions. An object the lock could not check (see
// engine.Unchecked) keeps Locked and Ready False, reason Unchecked: it
// may have drifted, and the lock could not correct it if it had. It is
// not counted as drifted, since it may just as well be in line.
func heldLock(s *v1alpha1.LockStatus, generation int64, h heldReport) {
	s.ObservedGeneration = generation
	s.LockedObjects = h.res.Locked
	locked := lockedCondition(h)
	drifted := driftedCondition(s, h)
	fighting := fightingCondition(h)
	ready := readyCondition(h, locked, fighting)
	setConditions(s, generation, locked, drifted, fighting, ready)
}

// lockedCondition is the Locked condition of a lock that holds its
// objects: the first of what keeps it from holding them, else Locked.
func lockedCondition(h heldReport) metav1.Condition {
	var locked metav1.Condition
	switch {
	case h.unverified != "":
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonNotAppliedByHelm, h.unverified)
	case len(h.res.Failed) > 0:
		f := h.res.Failed[0]
		locked = condition(v1alpha1.ConditionLocked, false, f.Reason,
			limit(fmt.Sprintf("the API server refuses the correction of %s: %v; it is tried again at %s", objectName(f.Kind, f.Ref), f.Err, f.RetryAt.UTC().Format(time.RFC3339))))
	case len(h.res.Unchecked) > 0:
		// Not Locked: the lock can tell neither whether these objects
		// are as declared nor correct them, since a write is refused
		// where its dry run was. Nor Drifted: that is not known either.
		u := h.res.Unchecked[0]
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonUnchecked,
			limit(fmt.Sprintf("%d of %d objects %s could not be checked: the API server refuses the dry run that tells drift from the form it stores. %s; it is tried again at %s",
				len(h.res.Unchecked), h.res.Objects, h.of, uncheckedMessage(u), u.RetryAt.UTC().Format(time.RFC3339))))
	case len(h.res.Conflicts) > 0:
		msg := conflictMessage(h.res.Conflicts[0])
		if n := len(h.res.Conflicts) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more objects)", n)
		}
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonConflict, limit(msg))
	case len(h.res.Unresolved) > 0:
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonWaitingForTypes, limit(joinErrors(h.res.Unresolved)))
	case len(h.res.Waiting) > 0:
		w := h.res.Waiting[0]
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonWaitingForNamespace,
			fmt.Sprintf("%d objects wait for namespace %s, which this lock declares too, to exist", len(h.res.Waiting), w.Namespace))
	case len(h.res.Unwatched) > 0 && apierrors.IsForbidden(h.res.WatchError):
		// Not a passing outage: the locker's own RBAC (the chart's
		// ClusterRole, trimmed) lacks a read.
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonWatchForbidden,
			limit(fmt.Sprintf("the locker may not watch what it holds: %v; grant its ServiceAccount get, list and watch on it", h.res.WatchError)))
	case len(h.res.Unwatched) > 0:
		why := "not listed yet, or failing"
		if h.res.WatchError != nil {
			why = h.res.WatchError.Error()
		}
		locked = metav1.Condition{Type: v1alpha1.ConditionLocked, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonWatchesNotSynced,
			Message: limit(fmt.Sprintf("the watches of %s do not see changes as they happen (%s); the objects %s may have drifted unseen, and are checked again once the watches are back",
				joinResources(h.res.Unwatched), why, h.of))}
	case h.syncErr != nil:
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonCorrectionFailed, limit(h.syncErr.Error()))
	case h.lock.Warn:
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonWarnMode,
			fmt.Sprintf("spec.mode is Warn: the %d objects %s are checked and drift is reported, never reverted", h.res.Objects, h.of))
	case h.lock.Phase == lock.Locked:
		locked = condition(v1alpha1.ConditionLocked, true, v1alpha1.ReasonLocked,
			fmt.Sprintf("all %d objects %s are held as the manifest declares", h.res.Objects, h.of))
	default:
		locked = condition(v1alpha1.ConditionLocked, false, v1alpha1.ReasonReconciling,
			fmt.Sprintf("checking the %d objects %s", h.res.Objects, h.of))
	}

	return locked
}

// driftedCondition says whether any object the lock holds differs from
// the manifest, naming s's last drift.
func driftedCondition(s *v1alpha1.LockStatus, h heldReport) metav1.Condition {
	drifted := condition(v1alpha1.ConditionDrifted, false, v1alpha1.ReasonInLine, "every checked object is as the manifest declares")
	if h.res.Drifted > 0 {
		why := "corrections are failing or held back"
		if h.lock.Warn {
			why = "spec.mode is Warn, so drift is reported and not reverted"
		}
		drifted = condition(v1alpha1.ConditionDrifted, true, v1alpha1.ReasonDrift,
			fmt.Sprintf("%d of %d objects differ from the manifest; %s", h.res.Drifted, h.res.Objects, why))
		if s.LastDrift != nil {
			drifted.Message += "; the last drift: " + describeRecord(s.LastDrift)
		}
	}
	return drifted
}

// fightingCondition says whether someone keeps writing what the lock
// reverts.
func fightingCondition(h heldReport) metav1.Condition {
	fighting := condition(v1alpha1.ConditionFighting, false, v1alpha1.ReasonNoFight, "")
	if len(h.res.Fights) > 0 {
		msg := fightMessage(h.res.Fights[0])
		if n := len(h.res.Fights) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more objects)", n)
		}
		fighting = condition(v1alpha1.ConditionFighting, true, v1alpha1.ReasonFighting, limit(msg))
	}
	return fighting
}

// readyCondition sums up locked and fighting, once the lock has settled.
func readyCondition(h heldReport, locked, fighting metav1.Condition) metav1.Condition {
	var ready metav1.Condition
	switch {
	case len(h.res.Fights) > 0:
		ready = condition(v1alpha1.ConditionReady, false, v1alpha1.ReasonFighting, fighting.Message)
	case locked.Reason == v1alpha1.ReasonUnchecked:
		// In Warn mode too: the lock cannot report drift of what it
		// cannot check.
		ready = locked
		ready.Type = v1alpha1.ConditionReady
	case h.settled && locked.Status == metav1.ConditionUnknown:
		ready = locked
		ready.Type = v1alpha1.ConditionReady
	case h.settled && h.lock.Warn:
		ready = condition(v1alpha1.ConditionReady, true, v1alpha1.ReasonMonitoring, locked.Message)
	case h.settled:
		ready = condition(v1alpha1.ConditionReady, true, v1alpha1.ReasonLocked, locked.Message)
	default:
		ready = locked
		ready.Type = v1alpha1.ConditionReady
	}
	return ready
}

func condition(typ string, status bool, reason, message string) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: message}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

func setConditions(s *v1alpha1.LockStatus, generation int64, conds ...metav1.Condition) {
	for _, c := range conds {
		c.ObservedGeneration = generation
		meta.SetStatusCondition(&s.Conditions, c)
	}
}

// notLocked lists the objects of the revision that are not held, and why,
// at most v1alpha1.MaxNotLocked of them.
func notLocked(optedOut []v1alpha1.ObjectProblem, revision int, res engine.Result, syncErr error) []v1alpha1.ObjectProblem {
	out := append([]v1alpha1.ObjectProblem(nil), optedOut...)
	for _, u := range res.Unverified {
		out = append(out, v1alpha1.ObjectProblem{Object: objectName(u.Kind, u.Ref), Reason: v1alpha1.ReasonNotAppliedByHelm, Message: limit(unverifiedMessage(revision, u))})
	}
	for _, f := range res.Failed {
		out = append(out, v1alpha1.ObjectProblem{Object: objectName(f.Kind, f.Ref), Reason: f.Reason, Message: limit(f.Err.Error())})
	}
	for _, u := range res.Unchecked {
		out = append(out, v1alpha1.ObjectProblem{Object: objectName(u.Kind, u.Ref), Reason: v1alpha1.ReasonUnchecked, Message: limit(uncheckedMessage(u))})
	}
	for _, c := range res.Conflicts {
		out = append(out, v1alpha1.ObjectProblem{Object: objectName(c.Kind, c.Ref), Reason: v1alpha1.ReasonConflict, Message: conflictMessage(c)})
	}
	for _, w := range res.Waiting {
		out = append(out, v1alpha1.ObjectProblem{Object: objectName(w.Kind, w.Ref), Reason: v1alpha1.ReasonWaitingForNamespace,
			Message: fmt.Sprintf("namespace %s, which this lock declares too, does not exist yet; the object is created once it does", w.Namespace)})
	}
	for _, ref := range res.Finished {
		out = append(out, v1alpha1.ObjectProblem{Object: objectName("Job", ref), Reason: v1alpha1.ReasonFinished,
			Message: "the Job finished and its ttlSecondsAfterFinished deleted it; it is not recreated, which would run it again"})
	}
	for _, err := range res.Unresolved {
		var te *engine.TypeError
		if errors.As(err, &te) {
			out = append(out, v1alpha1.ObjectProblem{Object: te.Kind.Kind + " " + te.Name, Reason: v1alpha1.ReasonTypeNotServed, Message: limit(err.Error())})
		} else {
			out = append(out, v1alpha1.ObjectProblem{Object: "", Reason: v1alpha1.ReasonInvalid, Message: limit(err.Error())})
		}
	}
	for _, err := range flatten(syncErr) {
		var oe *engine.ObjectError
		if !errors.As(err, &oe) {
			continue
		}
		reason := v1alpha1.ReasonAPIError
		var open *LockOpenError
		var notHeld *NotHeldError
		switch {
		case errors.As(err, &open):
			reason = v1alpha1.ReasonHelmOperationInProgress
		case errors.As(err, &notHeld):
			reason = notHeld.Reason
		case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
			reason = v1alpha1.ReasonConflict
		}
		out = append(out, v1alpha1.ObjectProblem{Object: oe.Ref.String(), Reason: reason, Message: limit(oe.Err.Error())})
	}
	if len(out) > v1alpha1.MaxNotLocked {
		out = out[:v1alpha1.MaxNotLocked]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// uncheckedMessage says where an unchecked object differs, and who may not
// dry-run its correction: "ValidatingWebhookConfiguration wh differs at
// /webhooks/0/rules, which may be the API server's form or drift: ...".
func uncheckedMessage(u engine.Unchecked) string {
	return fmt.Sprintf("%s differs at %s, which may be the API server's form or drift: %v", objectName(u.Kind, u.Ref), strings.Join(u.Paths, ", "), u.Err)
}

// conflictMessage says which lock holds an object another lock declares.
func conflictMessage(c engine.Conflict) string {
	return fmt.Sprintf("%s holds %s, and one object is held by one lock: this lock writes nothing to it, and takes it over once %s no longer declares it",
		c.Holder, objectName(c.Kind, c.Ref), c.Holder)
}

// flatten undoes errors.Join.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// objectName is how events and status name an object: its kind, then
// namespace/name.
func objectName(kind string, ref engine.ObjectRef) string {
	if ref.Namespace == "" {
		return kind + " " + ref.Name
	}
	return kind + " " + ref.Namespace + "/" + ref.Name
}

// driftRecord is the status form of a drift.
func driftRecord(d engine.Drift, at time.Time) *v1alpha1.Drift {
	// The API keeps times to the second; so does the record, or it would
	// never equal the status read back.
	r := &v1alpha1.Drift{Object: objectName(d.Kind, d.Ref), Paths: d.Paths, Deleted: d.Deleted, Time: metav1.NewTime(at).Rfc3339Copy(), Corrected: d.Corrected}
	for _, m := range d.Managers {
		fm := v1alpha1.FieldManager{Manager: m.Name, Operation: m.Operation}
		if !m.Time.IsZero() {
			t := metav1.NewTime(m.Time).Rfc3339Copy()
			fm.Time = &t
		}
		r.Managers = append(r.Managers, fm)
	}
	return r
}

// describeRecord says what drifted and who did it, for events and
// conditions: "Deployment ns/web at /spec/replicas, changed by
// kubectl-patch (Update at 2026-01-02T03:04:05Z)".
func describeRecord(r *v1alpha1.Drift) string {
	var b strings.Builder
	b.WriteString(r.Object)
	if r.Deleted {
		// The API server keeps no record of who deleted an object.
		b.WriteString(" was deleted")
		return b.String()
	}
	b.WriteString(" at " + strings.Join(r.Paths, ", "))
	if len(r.Managers) == 0 {
		b.WriteString(", by an unknown actor")
		return b.String()
	}
	b.WriteString(", changed by ")
	for i, m := range r.Managers {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(describeManager(m.Manager, m.Operation, m.Time))
	}
	return b.String()
}

func describeManager(name, operation string, at *metav1.Time) string {
	detail := operation
	if at != nil {
		detail += " at " + at.UTC().Format(time.RFC3339)
	}
	if detail == "" {
		return name
	}
	return name + " (" + strings.TrimSpace(detail) + ")"
}

// fightMessage names the other actor and the fields, and the ignore rule
// that would end the fight if that actor should own them.
func fightMessage(f engine.Fight) string {
	var managers []string
	for _, m := range f.Managers {
		var at *metav1.Time
		if !m.Time.IsZero() {
			t := metav1.NewTime(m.Time)
			at = &t
		}
		managers = append(managers, describeManager(m.Name, m.Operation, at))
	}
	who := "another actor"
	if len(managers) > 0 {
		who = strings.Join(managers, ", ")
	}
	paths, _ := json.Marshal(f.Paths)
	return fmt.Sprintf("%s keeps rewriting %s of %s; corrections wait until %s. If it should own those fields, add to spec.ignore: {\"paths\": %s, \"target\": {\"kind\": %q, \"name\": %q}}",
		who, strings.Join(f.Paths, ", "), objectName(f.Kind, f.Ref), f.Until.UTC().Format(time.RFC3339), paths, f.Kind, regexp.QuoteMeta(f.Ref.Name))
}

// writeStatus patches the CR's status if it changed. Unchanged statuses
// are not written, so a correction does not cost a second write; it
// reports whether it wrote.
func (c *Controller) writeStatus(ctx context.Context, hr *v1alpha1.HelmRelease, status v1alpha1.HelmReleaseStatus) (bool, error) {
	c.setAdmission(&status.LockStatus, hr.Spec.Mode, hr.Generation)
	return c.patchStatus(ctx, v1alpha1.Resource, v1alpha1.Kind, hr, hr.Status, status)
}

// errLabelsChanged says a shard's status write was refused because the
// CR's labels are no longer those its cache showed: the CR may have moved
// to another shard, which writes its status now. The watch event of the
// change is on its way, and syncs the CR again if it is still this
// shard's.
var errLabelsChanged = errors.New("the CR's labels changed since it was read; it may have left this shard")

// labelsChangedRetry is when a CR whose status write errLabelsChanged
// refused is synced again at the latest. The watch event of the change
// normally comes first: a deletion if the CR left the shard, an update if
// its labels changed within the selector.
const labelsChangedRetry = time.Second

// patchStatus writes status as the status of the CR obj of resource, if
// it differs from written, the status the cache shows, as written (see
// sameStatus). In a shard (Config.Selector), the patch first tests that
// the CR's labels are those the cache showed: a sync under way when the
// CR is relabelled into another shard must not overwrite what that shard
// writes.
func (c *Controller) patchStatus(ctx context.Context, resource schema.GroupVersionResource, kind string, obj metav1.Object, written, status any) (bool, error) {
	fields, err := toJSONMap(status)
	if err != nil {
		return false, err
	}
	old, err := toJSONMap(written)
	if err != nil {
		return false, err
	}
	if reflect.DeepEqual(fields, old) {
		return false, nil
	}
	guarded := c.cfg.Selector != nil && !c.cfg.Selector.Empty()
	patch, err := statusPatch(fields, obj.GetLabels(), guarded)
	if err != nil {
		return false, err
	}
	_, err = c.cfg.Dynamic.Resource(resource).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err != nil && guarded && patchTestFailed(err):
		return false, errLabelsChanged
	case err != nil:
		return false, fmt.Errorf("writing status of %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return true, nil
}

// statusPatch is the JSON patch that writes status; guarded, it first
// tests that the object's labels are labels (none, if empty).
func statusPatch(status map[string]any, labels map[string]string, guarded bool) ([]byte, error) {
	// The whole status, not a merge patch from written: the cache may not
	// show the last write yet, and a merge patch computed from an older
	// status would leave what that write added and this one drops (a
	// notLocked entry beside state Locked).
	ops := []map[string]any{{"op": "add", "path": "/status", "value": status}}
	if guarded {
		// A test of null passes only where there are no labels.
		var want any
		if len(labels) > 0 {
			want = labels
		}
		ops = append([]map[string]any{{"op": "test", "path": "/metadata/labels", "value": want}}, ops...)
	}
	return json.Marshal(ops)
}

// patchTestFailed reports whether a JSON patch was refused because a test
// operation failed. The API server answers 422 with its own message for
// any patch it cannot apply, and gives no causes, which every validation
// error has; statusPatch's add always applies.
func patchTestFailed(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	return s.Code == http.StatusUnprocessableEntity && (s.Details == nil || len(s.Details.Causes) == 0)
}

// sameStatus reports whether a and b are written alike. reflect.DeepEqual
// would tell a status read from the API (times parsed into the local zone,
// absent lists nil) from the same status built here, and every sync would
// write it again.
func sameStatus(a, b v1alpha1.HelmReleaseStatus) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func toJSONMap(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

// joinResources names resource types for a message.
func joinResources(gvrs []schema.GroupVersionResource) string {
	names := make([]string, len(gvrs))
	for i, gvr := range gvrs {
		names[i] = gvr.Resource
		if gvr.Group != "" {
			names[i] += "." + gvr.Group
		}
	}
	return strings.Join(names, ", ")
}

func joinErrors(errs []error) string {
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// limit keeps condition messages within what a person reads and the API
// server's 32 KiB bound.
func limit(s string) string {
	const max = 4096
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
