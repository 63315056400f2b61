package engine

import (
	"reflect"
	"slices"
	"sync/atomic"
	"time"
	"unique"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/informers"
)

// objectSet is the engine's state for one key.
type objectSet struct {
	// key is the key the set is declared under.
	key  string
	spec ObjectSet
	// since, then seq, order the set among those that declare one object
	// (see ObjectSet.Since); seq counts the keys in the order they were
	// first declared. since is in Unix nanoseconds, 0 for none, not a
	// time.Time, 16 bytes more: with an objectSet of 264 bytes in place of
	// 256, BenchmarkHeldMemory's heap spans in use grew by 120 bytes a
	// held object though its live heap grew by 1 (cause not found).
	since int64
	seq   uint64
	// owned is Engine.owned when the set last took an object into its
	// holding: the set's objects were all tracked from then on (see
	// listing.owned).
	owned uint64
	// namespaces are the Namespaces the set declares: its objects in one
	// of them wait for it rather than fail (see Waiting).
	namespaces map[string]bool
	// kinds are the kinds whose CRDs the set declares: creating their
	// objects waits for the CRD to be served again rather than back off
	// (see errTypeWaiting).
	kinds      map[schema.GroupKind]bool
	objects    lockedObjects
	unresolved []*unresolvedObject
	dirty      map[ObjectRef]int64                 // when each was first marked, in Unix ns
	gvrs       map[schema.GroupVersionResource]int // informers acquired
	// paused is set while the set holds its objects but neither checks
	// nor writes them (see Engine.Pause).
	paused bool
	// relisted is set once a Sync of the set waited for its types'
	// informers to list them again (see Engine.readAhead): a set waits
	// once, and what a relist did not find is read.
	relisted bool
	// applied counts the objects that needed verifying and that an
	// owner was seen to write at or after Verification.Since when they
	// were verified (see Result.Applied). It sits in paused's padding.
	applied uint32
}

// groupVersions lists the group versions of s's objects, resolved or not.
func (s *objectSet) groupVersions() []schema.GroupVersion {
	var out []schema.GroupVersion
	for gvr := range s.gvrs {
		out = append(out, gvr.GroupVersion())
	}
	for _, u := range s.unresolved {
		if gv := u.obj.GroupVersionKind().GroupVersion(); !slices.Contains(out, gv) {
			out = append(out, gv)
		}
	}
	return out
}

// lockedObject is one declared object whose type the API server serves.
// One is kept for each locked object for as long as the lock, so its
// size counts: it takes the size class of 128 bytes
// (TestLockedObjectSize), where it took 192 with its ObjectRef whole and
// a pointer for each thing few objects ever have. What most objects never
// need is kept by pointer, one for each group of fields, and the pointer
// is set only for those that do.
type lockedObject struct {
	// gvr, namespace and name are the object's ObjectRef (see ref), in
	// half its size: the resource is a handle every object of its type
	// shares.
	gvr             unique.Handle[schema.GroupVersionResource]
	namespace, name string
	// set is the set that declares the object, for the engine's owners.
	set *objectSet
	// declared is the normalized declaration, namespace resolved, as
	// a deflated tree (see packDeclaration): a tenth of its size as nested
	// maps, and decoded in microseconds when an event needs it. It is
	// kept with its length in one allocation (see packKept).
	declared atomic.Pointer[byte]
	// generation tells this declaration from earlier ones of the same
	// object, for inLineStub.
	generation uint64
	// metadata names the labels and annotations the declaration holds
	// (see Engine.heldMetadata), shared by the objects that hold the same
	// keys (see Engine.internHeld).
	metadata *informers.HeldMetadata
	// digest identifies the declaration as the caller gave it, so that a
	// new declaration of the same object can tell whether it changed.
	digest uint64
	// applyManager is the Apply field manager last seen on the live
	// object, for ObjectSet.ApplyManager; the zero handle if none was.
	applyManager unique.Handle[string]
	// extras are what few declarations have besides the object, set
	// before the object is shared and never changed; nil for most.
	extras *declaredExtras
	// drift is set once the object has drifted or been written by the
	// engine; most never are.
	drift *driftState
	// proof is set while the object waits to be verified (see
	// Verification).
	proof *proof
	// rulesSeen is the count of changes of the kind's merge rules (see
	// schemas.rulesAt) the object was last checked by. Rules read from
	// the API server in place of the fallback tell the stored form from
	// drift differently: the first check by them is fresh again.
	rulesSeen uint32
	// flags are flagFinished and flagUnproved, read and written from
	// other goroutines than the set's sync; one word for both keeps the
	// object in its size class.
	flags atomic.Uint32
	// canonical is set once the declaration has been put in the form the
	// API server stores it by a dry run (see canonicalize), and fresh
	// while a mismatch may be the API server's form rather than drift:
	// at the first check, and at the check after the engine's own write.
	canonical, fresh bool
	expired          bool
	// inLine is set once the object was checked and found, or made, as
	// declared, and cleared when that check fails.
	inLine bool
	// rank is the kind's CreationOrder: a Sync checks, and so creates,
	// the set's objects in that order.
	rank uint8
	// applying is set while the object has not been in line since its
	// declaration was new or changed: its first correction is the set
	// applying it (see Drift.Applying).
	applying bool
}

// declaredExtras are the parts of a declaration that few have.
type declaredExtras struct {
	// ignore are the declared fields the engine keeps as they are live.
	ignore []Pointer
	// fallback, packed, is the object as the last verified declaration
	// had it, held until this one is verified (see
	// Verification.Fallback); nil when there is none.
	fallback []byte
}

// ref is the object's ObjectRef.
func (o *lockedObject) ref() ObjectRef {
	return ObjectRef{GVR: o.gvr.Value(), Namespace: o.namespace, Name: o.name}
}

const (
	// flagFinished is set while the object was last seen as a finished
	// Job that its TTL will delete (see finishedWithTTL), and expired once
	// it is gone: it is not recreated.
	flagFinished uint32 = 1 << iota
	// flagUnproved says proof is set, for readers other than the set's
	// sync (see held).
	flagUnproved
)

// flag reports whether f is set.
func (o *lockedObject) flag(f uint32) bool { return o.flags.Load()&f != 0 }

// setFlag sets f, or clears it.
func (o *lockedObject) setFlag(f uint32, on bool) {
	if on {
		o.flags.Or(f)
	} else {
		o.flags.And(^f)
	}
}

// is reports whether ref names o.
func (o *lockedObject) is(ref ObjectRef) bool {
	return o.name == ref.Name && o.namespace == ref.Namespace && o.gvr.Value() == ref.GVR
}

// setRef sets what ref returns.
func (o *lockedObject) setRef(ref ObjectRef) {
	o.gvr, o.namespace, o.name = unique.Make(ref.GVR), ref.Namespace, ref.Name
}

// fallback returns the packed fallback (see declaredExtras), or nil.
func (o *lockedObject) fallback() []byte {
	if o.extras == nil {
		return nil
	}
	return o.extras.fallback
}

// manager returns applyManager as a string, empty if none was seen.
func (o *lockedObject) manager() string {
	if o.applyManager == (unique.Handle[string]{}) {
		return ""
	}
	return o.applyManager.Value()
}

// written is what the engine remembers of its own writes of an object.
type written struct {
	// noop remembers a patch the API server applied without changing the
	// object (it normalizes, say, "1000m" CPU to "1"), so that it is not
	// sent again until the object changes.
	noop *noopPatch
	// superseded holds the resourceVersions of the engine's last write:
	// the one it patched and the ones its own requests produced before
	// the last. The informer may still deliver them after the write; they
	// are known to be old, and the event of the newest version follows.
	superseded []string
}

// ignored returns the declared fields the engine keeps as they are live.
func (o *lockedObject) ignored() []Pointer {
	if o.extras == nil {
		return nil
	}
	return o.extras.ignore
}

// writes returns what the engine remembers of its writes of the object,
// set.
func (o *lockedObject) writes() *written {
	return &o.drifts().written
}

// drifts returns o.drift, set.
func (o *lockedObject) drifts() *driftState {
	if o.drift == nil {
		o.drift = &driftState{}
	}
	return o.drift
}

// superseded reports whether version is one the engine's last write left
// behind (see written.superseded).
func (o *lockedObject) superseded(version string) bool {
	return o.drift != nil && slices.Contains(o.drift.written.superseded, version)
}

// noop reports whether patch, on the object at version, was applied
// before and changed nothing (see written.noop).
func (o *lockedObject) noop(version, patch string) bool {
	if o.drift == nil {
		return false
	}
	w := o.drift.written
	return w.noop != nil && w.noop.resourceVersion == version && w.noop.data == patch
}

// driftState is what the engine remembers of an object that drifted, that
// it could not check (see Unchecked), or that it wrote.
type driftState struct {
	// drifted is set while the object is known to differ from its
	// declaration, at version ("" when it was deleted).
	drifted bool
	version string
	// times are when drifts were reported within the fight window;
	// fight and backoff describe a fight under way (see countDrift).
	times   []time.Time
	fight   *Fight
	backoff time.Duration
	// failure is set while the API server refuses the object's
	// correction for good (see Failure).
	failure *Failure
	// unchecked is set while the object differs where the API server
	// refuses every dry run that would tell its form from drift.
	unchecked *Unchecked
	// written is what the engine remembers of its own writes of the
	// object, kept here rather than by a pointer of its own in
	// lockedObject: an object the engine writes has mostly drifted.
	written written
}

// settle records that obj is in line.
func (o *lockedObject) settle() {
	o.inLine = true
	o.applying = false
	o.prove()
	if o.drift != nil {
		o.drift.drifted, o.drift.failure, o.drift.unchecked = false, nil, nil
	}
}

// proved records that obj, verified on live, no longer needs verifying,
// and counts it in s as applied when live shows the owner applied this
// declaration (see Result.Applied): one of the owners wrote it at or after
// Verification.Since, and it is no longer as the last verified declaration
// had it (its Fallback), or had no such declaration. An object that is
// still as the last one had it proves nothing of this one, however recent
// the owner's write: managedFields keep times to the second, and a
// declaration that restates the last one in another form is in line with
// no write at all. Only the goroutine syncing s calls it.
func (e *Engine) proved(s *objectSet, obj *lockedObject, live *unstructured.Unstructured) {
	v := s.spec.Verify
	if obj.proof == nil || live == nil || v == nil || !wroteSince(live, v.Owners, v.Since) {
		return
	}
	if fallback := obj.fallback(); fallback != nil {
		held, err := unpackDeclaration(fallback)
		if err != nil || e.rulesOf(obj).holds(live.Object, held.Object) {
			return
		}
	}
	s.applied++
}

// prove records that the object is verified: it is held as declared.
func (o *lockedObject) prove() {
	o.proof = nil
	o.setFlag(flagUnproved, false)
}

// held returns the declaration the object is held at: its own, or while
// it is unverified its last verified one (nil if none). Judge reads it
// from other goroutines than the set's sync.
func (o *lockedObject) held() (*unstructured.Unstructured, error) {
	if o.flag(flagUnproved) {
		fallback := o.fallback()
		if fallback == nil {
			return nil, nil
		}
		return unpackDeclaration(fallback)
	}
	return o.declaration()
}

type noopPatch struct {
	resourceVersion string
	data            string
}

// desired is the live object as it must be under rules (see
// mergeRules.desired), with the ignored fields as they are live.
func (o *lockedObject) desired(rules mergeRules, live, declared map[string]any) (map[string]any, error) {
	d, err := rules.desired(live, declared)
	if err != nil {
		return nil, err
	}
	keepLive(d, live, o.ignored())
	return d, nil
}

// inLineBy reports whether live is as declared under rules: by holds, or
// else by the full merge.
func (o *lockedObject) inLineBy(rules mergeRules, live, declared map[string]any) bool {
	if rules.holds(live, declared) {
		return true
	}
	desired, err := o.desired(rules, live, declared)
	return err == nil && reflect.DeepEqual(desired, live)
}

// declaration decodes the declared object.
func (o *lockedObject) declaration() (*unstructured.Unstructured, error) {
	return unpackDeclaration(kept(o.declared.Load()))
}

// unresolvedObject is a declared object whose kind the API server does not
// serve (yet): typically a custom resource whose CRD is in the same set.
type unresolvedObject struct {
	obj *unstructured.Unstructured
	err error
}
