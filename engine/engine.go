package engine

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/informers"
)

// DefaultFieldManager is the field manager of the engine's own writes.
const DefaultFieldManager = "helm-locker"

// ObjectRef names one object on the API server.
type ObjectRef struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
}

func (r ObjectRef) String() string {
	res := r.GVR.Resource
	if r.GVR.Group != "" {
		res += "." + r.GVR.Group
	}
	if r.Namespace == "" {
		return res + "/" + r.Name
	}
	return res + "/" + r.Namespace + "/" + r.Name
}

// ObjectSet is what a caller wants held: a set of objects, each kept as
// declared.
type ObjectSet struct {
	// Objects are the declared objects. The engine does not modify them.
	Objects []*unstructured.Unstructured
	// DefaultNamespace is given to namespaced objects that declare none,
	// as `helm install -n` and `kubectl apply -n` do. Cluster-scoped
	// objects never get a namespace.
	DefaultNamespace string
	// ApplyManager, if set, says the objects' owner writes them with
	// server-side apply, as this field manager (Helm 4 applies as
	// "helm"). After each correction the engine hands the fields it
	// restored to the object's Apply field manager, this one unless the
	// object names another, so that the owner's next apply owns them
	// again and can change or remove them. Left with the engine's own
	// manager, a restored list entry would survive the owner's next apply
	// beside the entry that replaces it. Deleted objects are recreated by
	// applying as that manager. Empty means the owner writes client-side.
	ApplyManager string
	// BeforeWrite, if set, is called before every write (see Write). An
	// error stops that write and is returned by Sync. It lets a caller
	// confirm that the lock still holds, for example that Helm has not
	// started an upgrade whose writes the engine would otherwise revert.
	BeforeWrite func(ctx context.Context, w Write) error
	// Prevent says the caller denies, at admission, requests that would
	// drift the set's objects (see Engine.Judge). The engine still
	// reverts what gets past admission.
	Prevent bool
	// Applied says the declaration was applied and in line before, such
	// as before the caller restarted: an object that differs from it now
	// was changed by someone else, and its correction is not Applying.
	Applied bool
	// ReportOnly makes the engine detect and report drift (see
	// Result.Drifts) and never write.
	ReportOnly bool
	// Ignore, if set, returns the fields of a declared object (namespace
	// resolved) that are neither compared nor reverted: the live value,
	// or its absence, is kept. Different sets' callbacks (Ignore, Verify)
	// may be called at once (see Engine.Prepare); one set's never are.
	Ignore func(declared *unstructured.Unstructured) []Pointer
	// Verify, if set, holds back every object its owner has not been seen
	// to apply (see Verification). Nil takes the declaration on trust.
	Verify *Verification
	// Since is when the set's lock began, such as its CR's creation: of
	// two sets that declare one object, the one with the earlier Since
	// holds it (a tie goes to the key declared first), and the other
	// reports a Conflict. Zero takes the time key was first declared. A
	// Since that outlives the process, such as a creation timestamp,
	// keeps the same holder across restarts whatever order the sets are
	// declared in, unless two are equal.
	Since time.Time
	// Precedence ranks the sets that declare one object before Since
	// does: the set with the higher Precedence holds it, whatever their
	// Since. A caller gives the sets of less trusted authors a lower one,
	// so that such an author cannot take an object over from a trusted
	// one by declaring it first.
	Precedence int
	// Writer, if set, is the client every write for this set goes
	// through, such as one impersonating an identity with no more power
	// than the set's author; reads use the engine's own client. Nil
	// writes with the engine's client.
	Writer dynamic.Interface
}

// Write is a write the engine is about to make, for ObjectSet.BeforeWrite.
type Write struct {
	Ref ObjectRef
	// Live is the object as it is; nil when the write recreates it.
	Live *unstructured.Unstructured
	// Restores says the write puts back declared fields, or list
	// entries, that the live object lacks. A removal leaves no trace in
	// managedFields of who made it, so a caller that tells its owner's
	// changes from drift by them cannot tell for this one.
	Restores bool
}

// Options configure an Engine. Zero fields take the Default values.
type Options struct {
	// FieldManager names the engine's writes; DefaultFieldManager if empty.
	FieldManager string
	// More than FightThreshold reverts of one object within FightWindow
	// make a fight (see Fight): the next revert waits FightBackoff, and
	// each one after it twice as long, up to MaxFightBackoff.
	FightThreshold  int
	FightWindow     time.Duration
	FightBackoff    time.Duration
	MaxFightBackoff time.Duration
	// Now is the clock, for tests.
	Now func() time.Time
	// Readiness, if set, is what the engine's informers wait on after
	// the API server was unavailable (see informers.Options.Readiness).
	Readiness informers.Readiness
	// OpenAPI, if set, is where the merge rules of each kind are read:
	// the OpenAPI v3 documents the API server publishes, with the list,
	// map and union markers of built-in kinds and of CRDs' structural
	// schemas. Nil uses client-go's compiled schema for built-in kinds
	// and holds other kinds' lists whole.
	OpenAPI openapi.ClientWithContext
	// Workers is how many sets a Locker syncs at once; DefaultWorkers if
	// zero. An Engine's caller runs its own workers.
	Workers int
	// Config, if set, is what the engine's informers watch with (see
	// informers.Options.Config), so that objects no set holds are never
	// decoded. Nil watches through the dynamic client.
	Config *rest.Config
}

// The defaults of Options: more than 5 reverts of one object within a
// minute make a fight; the next revert waits 10 s, and each one after it
// twice as long, up to 5 minutes.
const (
	DefaultFightThreshold  = 5
	DefaultFightWindow     = time.Minute
	DefaultFightBackoff    = 10 * time.Second
	DefaultMaxFightBackoff = 5 * time.Minute
)

// Engine keeps object sets, each under a caller's key, as declared. Watch
// events on a set's objects mark them dirty and call notify with the key;
// the caller then calls Sync(key) from its own workqueue, which corrects
// the dirty objects. An event that lands while Sync runs marks the object
// dirty again, so no change is ever missed.
type Engine struct {
	client       dynamic.Interface
	mapper       *mappings
	notify       func(key string)
	fieldManager string
	opts         Options
	informers    *informers.Registry
	schemas      *schemas
	// scales are the replicas paths of custom resources' scale
	// subresources, for JudgeScale.
	scales scalePaths
	// watching reports whether a type's informer is current; the
	// registry's Current, but for unit tests that drive Sync by hand
	// with no informer running.
	watching func(schema.GroupVersionResource) bool
	// cached looks an object up in its informer's cache; the registry's
	// Get, but for unit tests.
	cached func(gvr schema.GroupVersionResource, namespace, name string) (obj any, exists, synced bool, err error)

	generations atomic.Uint64

	mu   sync.Mutex
	sets map[string]*objectSet
	// declared counts the keys declared, for objectSet.seq.
	declared uint64
	owners   owners
	// heldKeys interns the HeldMetadata of locked objects by their keys,
	// written into heldBuf (see internHeld), under heldMu: objects are
	// resolved outside mu (see Prepare).
	heldMu   sync.Mutex
	heldKeys map[string]*informers.HeldMetadata
	heldBuf  []byte
}

// objectSet is the engine's state for one key.
type objectSet struct {
	spec ObjectSet
	// since, then seq, order the set among those that declare one object
	// (see ObjectSet.Since); seq counts the keys in the order they were
	// first declared.
	since time.Time
	seq   uint64
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
type lockedObject struct {
	ref ObjectRef
	// declared is the normalized declaration, namespace resolved, as
	// deflated JSON (see packDeclaration): a tenth of its size as nested
	// maps, and decoded in microseconds when an event needs it.
	declared atomic.Pointer[[]byte]
	// canonical is set once the declaration has been put in the form the
	// API server stores it by a dry run (see canonicalize), and fresh
	// while a mismatch may be the API server's form rather than drift:
	// at the first check, and at the check after the engine's own write.
	canonical, fresh bool
	// The small fields sit together, with no padding between them, and
	// what most objects never need (drift, fallback, ignore, written)
	// is kept by pointer: a lockedObject takes the size class of 192
	// bytes (TestLockedObjectSize). Every size class counts: one byte
	// over 256 once left the heap far more fragmented after a cold lock
	// (25 MiB more RSS at 20,000 objects, measured).
	//
	// rulesSeen is the count of changes of the kind's merge rules (see
	// schemas.rulesAt) the object was last checked by. Rules read from
	// the API server in place of the fallback tell the stored form from
	// drift differently: the first check by them is fresh again.
	rulesSeen uint32
	// finished is set while the object was last seen as a finished Job
	// that its TTL will delete (see finishedWithTTL), and expired once
	// it is gone: it is not recreated.
	finished atomic.Bool
	expired  bool
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
	// applyManager is the Apply field manager last seen on the live
	// object, for ObjectSet.ApplyManager.
	applyManager string
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
	// ignore are the declared fields the engine keeps as they are live;
	// nil for most objects, which have none.
	ignore *[]Pointer
	// fallback, packed, is the object as the last verified declaration
	// had it, held until this one is verified (see
	// Verification.Fallback); nil when there is none. Set before the
	// object is shared, and kept by pointer: most objects have none.
	fallback *[]byte
	// unproved says proof is set, for readers other than the set's sync
	// (see held).
	unproved atomic.Bool
	// drift is set once the object has drifted; most never do, and a
	// locked object's every byte counts.
	drift *driftState
	// proof is set while the object waits to be verified (see
	// Verification).
	proof *proof
	// written is set once the engine has written the object; most
	// objects it never writes.
	written *written
}

// written is what the engine remembers of its own writes of an object,
// kept apart from lockedObject (see its size class).
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
	if o.ignore == nil {
		return nil
	}
	return *o.ignore
}

// writes returns o.written, set.
func (o *lockedObject) writes() *written {
	if o.written == nil {
		o.written = &written{}
	}
	return o.written
}

// superseded reports whether version is one the engine's last write left
// behind (see written.superseded).
func (o *lockedObject) superseded(version string) bool {
	return o.written != nil && slices.Contains(o.written.superseded, version)
}

// noop reports whether patch, on the object at version, was applied
// before and changed nothing (see written.noop).
func (o *lockedObject) noop(version, patch string) bool {
	return o.written != nil && o.written.noop != nil && o.written.noop.resourceVersion == version && o.written.noop.data == patch
}

// driftState is what the engine remembers of an object that drifted.
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
}

// settle records that obj is in line.
func (o *lockedObject) settle() {
	o.inLine = true
	o.applying = false
	o.prove()
	if o.drift != nil {
		o.drift.drifted, o.drift.failure = false, nil
	}
}

// prove records that the object is verified: it is held as declared.
func (o *lockedObject) prove() {
	o.proof = nil
	o.unproved.Store(false)
}

// held returns the declaration the object is held at: its own, or while
// it is unverified its last verified one (nil if none). Judge reads it
// from other goroutines than the set's sync.
func (o *lockedObject) held() (*unstructured.Unstructured, error) {
	if o.unproved.Load() {
		if o.fallback == nil {
			return nil, nil
		}
		return unpackDeclaration(*o.fallback)
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
	return unpackDeclaration(*o.declared.Load())
}

// unresolvedObject is a declared object whose kind the API server does not
// serve (yet): typically a custom resource whose CRD is in the same set.
type unresolvedObject struct {
	obj *unstructured.Unstructured
	err error
}

// New returns an Engine; Run starts its informers. notify is called, from
// informer goroutines, with the key of every set that needs a Sync.
func New(client dynamic.Interface, mapper meta.ResettableRESTMapper, notify func(key string), opts Options) *Engine {
	e := &Engine{
		client:       client,
		mapper:       &mappings{mapper: mapper},
		notify:       notify,
		fieldManager: opts.FieldManager,
		sets:         map[string]*objectSet{},
		owners:       newOwners(),
	}
	if e.fieldManager == "" {
		e.fieldManager = DefaultFieldManager
	}
	e.opts = withDefaults(opts)
	e.schemas = newSchemas(opts.OpenAPI, e.opts.Now)
	e.informers = informers.NewRegistry(client, informers.Options{
		Handler:         e.onEvent,
		Tracked:         e.tracked,
		HeldMetadata:    e.heldMetadata,
		Store:           e.store,
		OnTypesChanged:  e.typesChanged,
		OnCRD:           e.scales.seen,
		OnHealthChanged: e.healthChanged,
		Readiness:       opts.Readiness,
		Config:          opts.Config,
	})
	e.watching = e.informers.Current
	e.cached = e.informers.Get
	return e
}

func withDefaults(o Options) Options {
	if o.FightThreshold <= 0 {
		o.FightThreshold = DefaultFightThreshold
	}
	if o.FightWindow <= 0 {
		o.FightWindow = DefaultFightWindow
	}
	if o.FightBackoff <= 0 {
		o.FightBackoff = DefaultFightBackoff
	}
	if o.MaxFightBackoff <= 0 {
		o.MaxFightBackoff = DefaultMaxFightBackoff
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (e *Engine) now() time.Time { return e.opts.Now() }

// Run runs the engine's informers until ctx is done, then stops them and
// waits for them to exit.
func (e *Engine) Run(ctx context.Context) error {
	return e.informers.Run(ctx)
}

// WaitForSynced waits until every informer the engine runs has listed its
// objects once, and reports false if ctx ended first.
func (e *Engine) WaitForSynced(ctx context.Context) bool { return e.informers.WaitForAllSynced(ctx) }

// Watched lists the resource types the engine watches now.
func (e *Engine) Watched() []schema.GroupVersionResource { return e.informers.Running() }

// Unwatched lists the resource types of held objects whose informers do not
// see their changes now (see Result.Unwatched).
func (e *Engine) Unwatched() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, gvr := range e.informers.Running() {
		if !e.watching(gvr) {
			out = append(out, gvr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// WatchError is why gvr's informer last failed to list or watch, or nil.
// A Forbidden one lasts until the locker's RBAC changes.
func (e *Engine) WatchError(gvr schema.GroupVersionResource) error {
	return e.informers.Err(gvr)
}

// Declare makes set the objects held under key, replacing what key held
// before, and ends a pause (see Pause). Objects that are no longer declared
// are left as they are. Every object is checked by the next Sync.
func (e *Engine) Declare(key string, set ObjectSet) {
	s := &objectSet{
		spec:       set,
		since:      set.Since,
		namespaces: map[string]bool{},
		kinds:      map[schema.GroupKind]bool{},
		dirty:      map[ObjectRef]int64{},
		gvrs:       map[schema.GroupVersionResource]int{},
	}
	for _, obj := range set.Objects {
		s.unresolved = append(s.unresolved, &unresolvedObject{obj: obj})
		switch obj.GroupVersionKind().GroupKind() {
		case namespaceKind:
			s.namespaces[obj.GetName()] = true
		case crdKind:
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
			s.kinds[schema.GroupKind{Group: group, Kind: kind}] = true
		}
	}
	// Resolved objects are kept normalized (see resolve); the caller's
	// copies are not held on to.
	s.spec.Objects = nil
	e.mu.Lock()
	old := e.sets[key]
	switch {
	case old != nil:
		s.seq = old.seq
		if s.since.IsZero() {
			s.since = old.since
		}
	default:
		e.declared++
		s.seq = e.declared
		if s.since.IsZero() {
			s.since = e.now()
		}
	}
	e.sets[key] = s
	var released []ObjectRef
	if old != nil {
		released = e.disownLocked(key, old)
	}
	acquire, notify := e.resolveLocked(key, s, old, nil)
	notify = append(notify, e.handOffLocked(released)...)
	e.mu.Unlock()
	for _, gvr := range acquire {
		e.informers.Acquire(gvr)
	}
	if old != nil {
		e.releaseInformers(old)
	}
	e.notifyAll(notify)
}

var (
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
	crdKind       = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// Prepare reads the merge rules of every declared set's kinds and resolves
// the objects waiting for them (see Sync), acquiring their informers. Called
// once the sets known at startup are declared and before Run, it lets each
// informer's first list find all of its objects tracked: the first Sync of
// every set then reads them from the cache, not with one GET each.
func (e *Engine) Prepare(ctx context.Context) {
	e.mu.Lock()
	var gvs []schema.GroupVersion
	for _, s := range e.sets {
		for _, gv := range s.groupVersions() {
			if !slices.Contains(gvs, gv) {
				gvs = append(gvs, gv)
			}
		}
	}
	e.mu.Unlock()
	e.schemas.load(ctx, gvs)
	resolved := e.resolveAll()
	e.mu.Lock()
	var acquire []schema.GroupVersionResource
	var notify []string
	for key, s := range e.sets {
		a, n := e.resolveLocked(key, s, nil, resolved)
		acquire, notify = append(acquire, a...), append(notify, n...)
	}
	e.mu.Unlock()
	for _, gvr := range acquire {
		e.informers.Acquire(gvr)
	}
	e.notifyAll(notify)
}

// Forget stops holding key's objects and leaves them as they are.
func (e *Engine) Forget(key string) {
	e.mu.Lock()
	s := e.sets[key]
	if s == nil {
		e.mu.Unlock()
		return
	}
	delete(e.sets, key)
	notify := e.handOffLocked(e.disownLocked(key, s))
	e.mu.Unlock()
	e.releaseInformers(s)
	e.notifyAll(notify)
}

// disownLocked takes key out of the owners of s's objects, and returns
// the objects key held that another set declares too.
func (e *Engine) disownLocked(key string, s *objectSet) []ObjectRef {
	var released []ObjectRef
	for _, o := range s.objects {
		ref := o.ref
		keys := e.owners.keys(ref)
		if len(keys) > 1 && keys[0] == key {
			released = append(released, ref)
		}
		e.owners.set(ref, slices.DeleteFunc(keys, func(k string) bool { return k == key }))
	}
	return released
}

// holderLocked returns the key of the set that holds ref, or "".
func (e *Engine) holderLocked(ref ObjectRef) string {
	return e.owners.holder(ref)
}

// holder returns the key of the set that holds ref, or "".
func (e *Engine) holder(ref ObjectRef) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holderLocked(ref)
}

// holdsBefore reports whether s holds an object that o declares too
// before o does: by Precedence, then since, then seq.
func (s *objectSet) holdsBefore(o *objectSet) bool {
	if s.spec.Precedence != o.spec.Precedence {
		return s.spec.Precedence > o.spec.Precedence
	}
	return s.since.Before(o.since) || (s.since.Equal(o.since) && s.seq < o.seq)
}

// ownLocked adds key, whose set is s, to ref's owners in the order of
// their sets' Precedence, since and seq, and returns the key of the set it takes ref
// over from, if any.
func (e *Engine) ownLocked(key string, s *objectSet, ref ObjectRef) string {
	keys := e.owners.keys(ref)
	if slices.Contains(keys, key) {
		return ""
	}
	at := len(keys)
	for i, k := range keys {
		if o := e.sets[k]; o != nil && s.holdsBefore(o) {
			at = i
			break
		}
	}
	holder := e.owners.holder(ref)
	e.owners.set(ref, slices.Insert(keys, at, key))
	if at == 0 && len(keys) > 0 {
		return holder
	}
	return ""
}

// handOffLocked marks each of refs dirty in the set that holds it now, and
// returns those sets' keys: they take over what another let go.
func (e *Engine) handOffLocked(refs []ObjectRef) []string {
	var keys []string
	for _, ref := range refs {
		key := e.holderLocked(ref)
		s := e.activeLocked(key)
		if s == nil || s.objects.get(ref) == nil {
			continue
		}
		if _, ok := s.dirty[ref]; !ok {
			s.dirty[ref] = e.now().UnixNano()
		}
		if !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return keys
}

// notifyAll calls notify with each key, without e.mu held.
func (e *Engine) notifyAll(keys []string) {
	slices.Sort(keys)
	for _, key := range slices.Compact(keys) {
		e.notify(key)
	}
}

// releaseInformers releases s's informers. It must be called without e.mu
// held: Release waits for the informer to stop, and the informer's handler
// takes e.mu.
func (e *Engine) releaseInformers(s *objectSet) {
	for gvr, n := range s.gvrs {
		for range n {
			e.informers.Release(gvr)
		}
	}
}

// resolution is an object resolved outside e.mu (see resolveAll).
type resolution struct {
	obj *lockedObject
	err error
}

// resolveAll resolves the unresolved objects of every set whose merge
// rules are read, outside e.mu and on every core: at startup, that is most
// of the engine's work, and each object's is its own. One worker resolves
// a set's objects, so a set's callbacks (ObjectSet.Ignore, Verify) are
// never called at once. resolveLocked takes the results in.
func (e *Engine) resolveAll() map[*unresolvedObject]resolution {
	type work struct {
		spec    ObjectSet
		objects []*unresolvedObject
	}
	var sets []work
	e.mu.Lock()
	for _, s := range e.sets {
		if len(s.unresolved) > 0 {
			sets = append(sets, work{spec: s.spec, objects: slices.Clone(s.unresolved)})
		}
	}
	e.mu.Unlock()
	var (
		mu       sync.Mutex
		resolved = map[*unresolvedObject]resolution{}
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	for range min(runtime.GOMAXPROCS(0), len(sets)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(sets); i = int(next.Add(1)) - 1 {
				mine := map[*unresolvedObject]resolution{}
				for _, u := range sets[i].objects {
					if e.schemas.known(u.obj.GroupVersionKind().GroupVersion()) {
						obj, err := e.resolve(u.obj, sets[i].spec)
						mine[u] = resolution{obj: obj, err: err}
					}
				}
				mu.Lock()
				maps.Copy(resolved, mine)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return resolved
}

// resolveLocked maps s's unresolved objects to resources, fills in their
// namespace, and returns the informers to acquire for those now resolved,
// and the keys of the sets it took objects over from (see ObjectSet.Since).
// old, if set, is the set key declared before: an object declared there
// alike is not applied anew (see Drift.Applying). resolved, if set, holds
// objects resolveAll resolved already.
func (e *Engine) resolveLocked(key string, s *objectSet, old *objectSet, resolved map[*unresolvedObject]resolution) (acquire []schema.GroupVersionResource, notify []string) {
	var still []*unresolvedObject
	for _, u := range s.unresolved {
		r, done := resolved[u]
		if gv := u.obj.GroupVersionKind().GroupVersion(); !done && !e.schemas.known(gv) {
			// Resolved by the rules they are checked by: Sync reads
			// them first. Informers started meanwhile would judge the
			// objects by other rules.
			still = append(still, &unresolvedObject{obj: u.obj, err: fmt.Errorf("the merge rules of %s are not read yet", gv)})
			continue
		}
		if !done {
			r.obj, r.err = e.resolve(u.obj, s.spec)
		}
		obj, err := r.obj, r.err
		if err != nil {
			still = append(still, &unresolvedObject{obj: u.obj, err: err})
			continue
		}
		if !s.objects.add(obj) {
			still = append(still, &unresolvedObject{obj: u.obj, err: fmt.Errorf("%s is declared twice", obj.ref)})
			continue
		}
		if old != nil {
			if prev := old.objects.get(obj.ref); prev != nil && prev.digest == obj.digest {
				obj.applying = prev.applying
			}
		}
		s.dirty[obj.ref] = e.now().UnixNano()
		if from := e.ownLocked(key, s, obj.ref); from != "" {
			notify = append(notify, from)
		}
		if s.gvrs[obj.ref.GVR] == 0 {
			s.gvrs[obj.ref.GVR] = 1
			acquire = append(acquire, obj.ref.GVR)
		}
	}
	s.unresolved = still
	return acquire, notify
}

// resolve finds obj's resource and scope through the RESTMapper.
func (e *Engine) resolve(obj *unstructured.Unstructured, spec ObjectSet) (*lockedObject, error) {
	defaultNamespace := spec.DefaultNamespace
	gvk := obj.GroupVersionKind()
	mapping, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, &TypeError{Kind: gvk, Name: obj.GetName(), Err: err}
	}
	declared := normalize(obj)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if declared.GetNamespace() == "" {
			declared.SetNamespace(defaultNamespace)
		}
		if declared.GetNamespace() == "" {
			return nil, &ObjectError{Ref: ObjectRef{GVR: mapping.Resource, Name: obj.GetName()}, Err: fmt.Errorf("%s is namespaced but declares no namespace, and the set has no default namespace", gvk.Kind)}
		}
	} else {
		declared.SetNamespace("")
	}
	data, err := packDeclaration(declared)
	if err != nil {
		return nil, &ObjectError{Ref: ObjectRef{GVR: mapping.Resource, Namespace: declared.GetNamespace(), Name: declared.GetName()}, Err: err}
	}
	rules, rulesSeen := e.schemas.rulesAt(gvk.GroupVersion())
	ignore := controllerOwned(declared)
	if spec.Ignore != nil {
		ignore = append(ignore, spec.Ignore(declared)...)
	}
	ignore = rules.keyed(declared.Object, ignore)
	locked := &lockedObject{
		ref:        ObjectRef{GVR: mapping.Resource, Namespace: declared.GetNamespace(), Name: declared.GetName()},
		generation: e.generations.Add(1),
		metadata:   e.internHeld(declared),
		digest:     digestOf(data),
		rank:       uint8(CreationOrder(gvk.GroupKind())),
		applying:   !spec.Applied,
		// The first check is fresh anyway; an object that check finds
		// in line, from the cache, is in line by these rules.
		rulesSeen: rulesSeen,
	}
	if len(ignore) > 0 {
		locked.ignore = &ignore
	}
	locked.declared.Store(&data)
	locked.fresh = true
	if needsProof(spec, obj) {
		locked.proof = &proof{Unverified: Unverified{Ref: locked.ref, Kind: gvk.Kind}}
		locked.unproved.Store(true)
		if f := spec.Verify.Fallback; f != nil {
			if held := f(obj); held != nil {
				held = normalize(held)
				held.SetNamespace(declared.GetNamespace())
				fallback, err := packDeclaration(held)
				if err != nil {
					return nil, &ObjectError{Ref: locked.ref, Err: err}
				}
				locked.fallback = &fallback
			}
		}
	}
	return locked, nil
}

// waitsToFinish reports whether obj is a Job that its TTL deletes once it
// finishes, and that has not finished yet.
func waitsToFinish(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "batch", Kind: "Job"}) {
		return false
	}
	_, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "ttlSecondsAfterFinished")
	return ok && !finishedWithTTL(obj)
}

// finishedWithTTL reports whether obj is a Job that has finished and that
// the TTL-after-finished controller deletes: recreating it would run it
// again, every time the TTL runs out.
func finishedWithTTL(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "batch", Kind: "Job"}) {
		return false
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "ttlSecondsAfterFinished"); !ok {
		return false
	}
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		c, _ := c.(map[string]any)
		if (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True" {
			return true
		}
	}
	return false
}

// aggregatedRules is where the aggregation controller writes an aggregated
// ClusterRole's rules.
var aggregatedRules = Pointer{"rules"}

// controllerOwned returns the declared fields that a Kubernetes controller
// writes by design, which a lock must leave to it: the rules of a
// ClusterRole with an aggregationRule are the union of the ClusterRoles it
// selects, kept so by kube-controller-manager, whatever the manifest says.
func controllerOwned(declared *unstructured.Unstructured) []Pointer {
	gvk := declared.GroupVersionKind()
	if gvk.Group == "rbac.authorization.k8s.io" && gvk.Kind == "ClusterRole" {
		if _, ok := declared.Object["aggregationRule"]; ok {
			return []Pointer{aggregatedRules}
		}
	}
	return nil
}

// onEvent marks the object dirty in the set that holds it.
func (e *Engine) onEvent(gvr schema.GroupVersionResource, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ref := ObjectRef{GVR: gvr, Namespace: m.GetNamespace(), Name: m.GetName()}
	now := e.now().UnixNano()
	e.mu.Lock()
	key := e.holderLocked(ref)
	// A paused holder checks nothing until it is declared again, which
	// checks every object; the next set in line waits for it.
	s := e.activeLocked(key)
	if s != nil {
		if _, ok := s.dirty[ref]; !ok {
			s.dirty[ref] = now
		}
	}
	e.mu.Unlock()
	if s != nil {
		e.notify(key)
	}
}

// inLineStub stands in the informer cache for a locked object that was as
// declared when it was stored, checked against the declaration with the
// given generation. Most locked objects are in line most of the time, so
// the cache holds little more than a name for them; an object that drifts
// is stored whole until it is back in line.
type inLineStub struct {
	// The Stub is kept by value: one allocation per object, not two.
	informers.Stub
	generation uint64
	// readsStatus marks a Job that its TTL deletes once it finishes: its
	// status tells when (see finishedWithTTL).
	readsStatus bool
}

// ReadsStatus tells the informers that a status-only change matters.
func (s *inLineStub) ReadsStatus() bool { return s.readsStatus }

// store decides what the informer cache keeps of a tracked object: an
// inLineStub when it is as declared for the set that holds it, else the
// whole object: its managedFields name who made the drift.
func (e *Engine) store(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) metav1.Object {
	ref := ObjectRef{GVR: gvr, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	e.mu.Lock()
	var locked *lockedObject
	var spec ObjectSet
	if s := e.sets[e.holderLocked(ref)]; s != nil {
		if locked = s.objects.get(ref); locked != nil {
			spec = s.spec
			locked.finished.Store(finishedWithTTL(obj))
		}
	}
	e.mu.Unlock()
	if locked != nil && !(spec.ApplyManager != "" && hasUpdateEntry(obj, e.fieldManager)) {
		if declared, err := locked.declaration(); err == nil && locked.inLineBy(e.schemas.rules(gvr.GroupVersion()), obj.Object, declared.Object) {
			return &inLineStub{Stub: *informers.NewStub(obj), generation: locked.generation, readsStatus: waitsToFinish(obj)}
		}
	}
	return obj
}

// tracked tells the informers which objects to keep in full.
func (e *Engine) tracked(gvr schema.GroupVersionResource, namespace, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owners.has(ObjectRef{GVR: gvr, Namespace: namespace, Name: name})
}

// heldMetadata names the labels and annotations the set that holds an
// object declares of it: a change to any other one is not drift, since
// the merge keeps what the declaration does not say. An object still to
// be verified may be held as its fallback has it, so all of its are held.
func (e *Engine) heldMetadata(gvr schema.GroupVersionResource, namespace, name string) *informers.HeldMetadata {
	ref := ObjectRef{GVR: gvr, Namespace: namespace, Name: name}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sets[e.holderLocked(ref)]
	if s == nil {
		return nil
	}
	o := s.objects.get(ref)
	if o == nil || o.unproved.Load() {
		return nil
	}
	return o.metadata
}

// maxHeldKeys bounds Engine.heldKeys. The objects of one chart share a
// handful of key sets; past this, sharing starts again from nothing.
const maxHeldKeys = 4096

// internHeld returns the HeldMetadata of declared's labels and
// annotations, shared with every object that holds the same keys. For
// keys it has seen, it allocates nothing.
func (e *Engine) internHeld(declared *unstructured.Unstructured) *informers.HeldMetadata {
	var labels, annotations [32]string
	l, a := sortedKeys(declared, "labels", labels[:0]), sortedKeys(declared, "annotations", annotations[:0])
	e.heldMu.Lock()
	defer e.heldMu.Unlock()
	buf := e.heldBuf[:0]
	for _, k := range l {
		buf = append(append(buf, k...), 0)
	}
	buf = append(buf, 0xff)
	for _, k := range a {
		buf = append(append(buf, k...), 0)
	}
	e.heldBuf = buf
	if p := e.heldKeys[string(buf)]; p != nil {
		return p
	}
	if e.heldKeys == nil || len(e.heldKeys) >= maxHeldKeys {
		e.heldKeys = map[string]*informers.HeldMetadata{}
	}
	held := informers.NewHeldMetadata(l, a)
	e.heldKeys[string(buf)] = &held
	return &held
}

// sortedKeys appends the keys of declared's metadata field to keys, sorted.
func sortedKeys(declared *unstructured.Unstructured, field string, keys []string) []string {
	m, _, _ := unstructured.NestedFieldNoCopy(declared.Object, "metadata", field)
	held, _ := m.(map[string]any)
	for k := range held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// typesChanged runs when a CRD changes: the RESTMapper forgets what it
// knew, and sets with objects of unknown kinds, or objects still to be
// brought in line, try again. A custom resource whose CRD was deleted and
// is being recreated fails to be created until the CRD is Established, an
// event of its own; without it, the set would wait out the caller's
// backoff.
func (e *Engine) typesChanged() {
	e.mapper.Reset()
	e.schemas.forget()
	e.mu.Lock()
	var keys []string
	for key, s := range e.sets {
		if !s.paused && (len(s.unresolved) > 0 || len(s.dirty) > 0) {
			keys = append(keys, key)
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		e.notify(key)
	}
}

// healthChanged runs when gvr's informer stops or starts seeing its objects
// as they are now: every set with objects of that type syncs, to say so
// (see Result.Unwatched) and to check what waited for the watch. Once it
// sees them again, every object of the type is checked: an informer
// started anew, as after its CRD was deleted and recreated, lists what is
// there and reports no deletion it missed while it was stopped.
func (e *Engine) healthChanged(gvr schema.GroupVersionResource, current bool) {
	now := e.now().UnixNano()
	e.mu.Lock()
	var keys []string
	for key, s := range e.sets {
		if s.gvrs[gvr] == 0 || s.paused {
			continue
		}
		keys = append(keys, key)
		if !current {
			continue
		}
		for _, o := range s.objects {
			if _, ok := s.dirty[o.ref]; !ok && o.ref.GVR == gvr {
				s.dirty[o.ref] = now
			}
		}
	}
	e.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		e.notify(key)
	}
}

// dynamicResource is a namespaced or cluster-wide dynamic client.
type dynamicResource = dynamic.ResourceInterface

// resource is the client of ref's resource, for reads.
func (e *Engine) resource(ref ObjectRef) dynamicResource {
	return resourceOf(e.client, ref)
}

// writer is the client of ref's resource for the writes of spec's set.
func (e *Engine) writer(spec ObjectSet, ref ObjectRef) dynamicResource {
	if spec.Writer != nil {
		return resourceOf(spec.Writer, ref)
	}
	return e.resource(ref)
}

func resourceOf(client dynamic.Interface, ref ObjectRef) dynamicResource {
	r := client.Resource(ref.GVR)
	if ref.Namespace == "" {
		return r
	}
	return r.Namespace(ref.Namespace)
}
