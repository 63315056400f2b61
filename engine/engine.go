package engine

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"

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
	// OnTypesChanged, if set, is called when a CustomResourceDefinition
	// is created, changed or deleted, after the engine has caught up: the
	// API server serves other types now. It must be quick.
	OnTypesChanged func()
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
	// noScan is set once a read-ahead scan could not be made (see
	// Engine.scan): the API server refused it, or the informers have no
	// watch path of their own. Read-aheads list from then on.
	noScan atomic.Bool
	// relistWaits are the sets waiting for their types' relists.
	relistWaits relistWaits
	schemas     *schemas
	// scales are the replicas paths of custom resources' scale
	// subresources, for JudgeScale.
	scales scalePaths
	// deletedCRDs are the types whose CRD is being deleted, whose
	// objects are not recreated meanwhile.
	deletedCRDs deletedCRDs
	// watching reports whether a type's informer is current; the
	// registry's Current, but for unit tests that drive Sync by hand
	// with no informer running.
	watching func(schema.GroupVersionResource) bool
	// cached looks an object up in its informer's cache; the registry's
	// Get, but for unit tests.
	cached func(gvr schema.GroupVersionResource, namespace, name string) (obj any, exists, synced bool, err error)

	generations atomic.Uint64
	// listings keep what read-ahead lists returned for other sets' syncs.
	listings listings
	// watches are the callers' Watch targets.
	watches watches

	mu   sync.Mutex
	sets map[string]*objectSet
	// declared counts the keys declared, for objectSet.seq.
	declared uint64
	// owned counts the objects taken into a set's holding, for
	// objectSet.owned.
	owned  uint64
	owners owners
	// heldKeys interns the HeldMetadata of locked objects by their keys,
	// written into heldBuf (see internHeld), under heldMu: objects are
	// resolved outside mu (see Prepare).
	heldMu   sync.Mutex
	heldKeys map[string]*informers.HeldMetadata
	heldBuf  []byte
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
		Handler:            e.onEvent,
		Tracked:            e.tracked,
		HeldMetadata:       e.heldMetadata,
		Store:              e.store,
		ReadsManagedFields: e.readsManagedFields,
		OnTypesChanged:     e.typesChanged,
		OnCRD:              e.seenCRD,
		OnHealthChanged:    e.healthChanged,
		Readiness:          opts.Readiness,
		Config:             opts.Config,
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
