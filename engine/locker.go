package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/workqueue"

	"github.com/helm-locker/helm-locker/engine/worker"
)

// DefaultWorkers is how many sets a Locker syncs at once unless
// Options.Workers says otherwise.
const DefaultWorkers = 4

// Locker holds named sets of objects as declared, continuously: an edit is
// reverted and a deleted object recreated as soon as a watch shows it. It
// is the Engine with everything it needs around it (informers, a
// rate-limited workqueue, a RESTMapper, the API server's merge rules), for
// an operator that locks its own objects.
//
// Lock, Update and Unlock may be called from any goroutine, before or
// after Run; sets are synced only while Run runs.
type Locker struct {
	engine  *Engine
	client  dynamic.Interface
	queue   workqueue.TypedRateLimitingInterface[string]
	workers int

	mu   sync.Mutex
	sets map[string]*Set
	// diffs numbers the sets Diff declares for a moment.
	diffs atomic.Uint64
}

// NewLocker returns a Locker that talks to the API server cfg names. It does
// no I/O; Run starts the work.
//
// A cfg that sets no rate limit of its own (QPS and Burst zero and no
// RateLimiter, as clientcmd returns it) is not throttled on the client:
// client-go would hold it to 5 requests a second, and locking 50 objects
// would take seconds. The API server's priority and fairness paces it
// instead, as it paces the helm-locker binary. Set cfg.QPS and cfg.Burst
// to throttle it on the client.
func NewLocker(cfg *rest.Config, opts Options) (*Locker, error) {
	if cfg.QPS == 0 && cfg.Burst == 0 && cfg.RateLimiter == nil {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS = -1
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	if opts.OpenAPI == nil {
		opts.OpenAPI = openapi.ToClientWithContext(disc.OpenAPIV3())
	}
	if opts.Config == nil {
		opts.Config = cfg
	}
	l := &Locker{
		client:  client,
		workers: opts.Workers,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "locker"}),
		sets: map[string]*Set{},
	}
	if l.workers <= 0 {
		l.workers = DefaultWorkers
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	l.engine = New(client, mapper, l.queue.Add, opts)
	return l, nil
}

// Run syncs the locked sets until ctx is done, then stops the informers and
// workers and waits for them.
func (l *Locker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.engine.Run(ctx) })
	wg.Go(func() { worker.Run(ctx, l.queue, l.workers, l.syncSet) })
	wg.Wait()
	return nil
}

// Lock starts holding objs under name, each as declared: objects that do
// not exist are created, and from then on every change is reverted. It
// fails at once, holding nothing, if an object cannot be held: one
// without a name, a kind the API server does not serve (unless the set
// declares its CRD), or one the API server's validation refuses in a
// server-side dry run. The error joins an *ObjectError or *TypeError per
// object. Lock does not wait for the objects to be in line; WaitLocked does.
func (l *Locker) Lock(ctx context.Context, name string, objs []*unstructured.Unstructured, opts ...SetOption) (*Set, error) {
	if name == "" {
		return nil, errors.New("a locked set needs a name")
	}
	s := &Set{locker: l, name: name, changed: make(chan struct{})}
	for _, o := range opts {
		o(&s.opts)
	}
	if err := l.check(ctx, name, objs, s.opts); err != nil {
		return nil, fmt.Errorf("set %s: %w", name, err)
	}
	l.mu.Lock()
	if _, dup := l.sets[name]; dup {
		l.mu.Unlock()
		return nil, fmt.Errorf("set %s is already locked; use its Update to change it", name)
	}
	l.sets[name] = s
	l.mu.Unlock()
	s.declare(objs)
	return s, nil
}

// Diff compares objs with the API server's copies as a set locked with opts
// would hold them (see Engine.Diff), without locking them: it writes
// nothing, and needs no Run. An object that does not exist is returned
// Missing; one that cannot be resolved is returned as an error, joined.
func (l *Locker) Diff(ctx context.Context, objs []*unstructured.Unstructured, opts ...SetOption) ([]ObjectDiff, error) {
	var o setOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkIgnore(o.ignore); err != nil {
		return nil, err
	}
	// No name of Lock's starts with a NUL.
	key := fmt.Sprintf("\x00diff-%d", l.diffs.Add(1))
	set := o.objectSet(objs, true)
	// Last in line for every object, a diff never holds one a set holds.
	set.Since = never
	l.engine.Declare(key, set)
	defer l.engine.Forget(key)
	l.engine.Prepare(ctx)
	return l.engine.Diff(ctx, key)
}

// never is later than any set's Since.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// set returns the set locked under name, or nil.
func (l *Locker) set(name string) *Set {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sets[name]
}

// syncSet syncs the set locked under key, for the worker loop, and tells
// the set's waiters how it went (see Set.observe). A panic in Engine.Sync
// is that set's error, so that one bad set does not stop the others; it
// is recovered here, not by the loop, for the waiters to see.
func (l *Locker) syncSet(ctx context.Context, key string) (time.Duration, error) {
	s := l.set(key)
	if s == nil {
		return 0, nil
	}
	generation := s.generation()
	var res Result
	err := worker.Recover("set "+key, func() (err error) {
		res, err = l.engine.Sync(ctx, key)
		return err
	})
	s.observe(generation, res, err)
	return res.RequeueAfter, err
}

// check refuses objects the set name cannot hold (see Lock): each is
// resolved and dry-run as a server-side apply, with strict field
// validation, as kubectl apply validates, and none may be held by another
// set. A kind whose CRD the set declares, and an object whose namespace the
// set declares, are left for the sync that follows their creation.
func (l *Locker) check(ctx context.Context, name string, objs []*unstructured.Unstructured, o setOptions) error {
	var errs []error
	if err := checkIgnore(o.ignore); err != nil {
		errs = append(errs, err)
	}
	crds, namespaces := declaredTypes(objs)
	seen := map[ObjectRef]bool{}
	var dryRuns []dryRun
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		switch {
		case obj.GetName() == "" && obj.GetGenerateName() != "":
			errs = append(errs, fmt.Errorf("%s %s*: named by metadata.generateName alone, so each apply creates a new object; a lock holds objects by name", gvk.Kind, obj.GetGenerateName()))
			continue
		case obj.GetName() == "":
			errs = append(errs, fmt.Errorf("a %s has no metadata.name; a lock holds objects by name", gvk.Kind))
			continue
		}
		mapping, err := l.engine.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			if !crds[gvk.GroupKind()] {
				errs = append(errs, &TypeError{Kind: gvk, Name: obj.GetName(), Err: err})
			}
			continue
		}
		declared := normalize(obj)
		ns := ""
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if ns = declared.GetNamespace(); ns == "" {
				ns = o.namespace
			}
		}
		ref := ObjectRef{GVR: mapping.Resource, Namespace: ns, Name: obj.GetName()}
		switch {
		case mapping.Scope.Name() == meta.RESTScopeNameNamespace && ns == "":
			errs = append(errs, &ObjectError{Ref: ref, Err: fmt.Errorf("%s is namespaced but declares no namespace, and the set has no DefaultNamespace", gvk.Kind)})
			continue
		case seen[ref]:
			errs = append(errs, &ObjectError{Ref: ref, Err: errors.New("declared twice")})
			continue
		}
		seen[ref] = true
		if holder := l.engine.holder(ref); holder != "" && holder != name && !strings.HasPrefix(holder, "\x00") {
			errs = append(errs, &ConflictError{Ref: ref, Holder: holder})
			continue
		}
		declared.SetNamespace(ns)
		dryRuns = append(dryRuns, dryRun{ref: ref, obj: declared})
	}
	l.dryRun(ctx, dryRuns)
	for _, d := range dryRuns {
		if d.err != nil && !(permanentReason(d.err) == ReasonNamespaceNotFound && namespaces[d.ref.Namespace]) {
			errs = append(errs, &ObjectError{Ref: d.ref, Err: fmt.Errorf("a dry run of applying it failed: %w", d.err)})
		}
	}
	return errors.Join(errs...)
}

// dryRun is one object check dry-runs, and its outcome.
type dryRun struct {
	ref ObjectRef
	obj *unstructured.Unstructured
	err error
}

// dryRunConcurrency bounds the dry runs check has in flight: one after
// the other, 50 objects would take 50 round trips.
const dryRunConcurrency = 16

// dryRun applies each of runs' objects as a strict server-side dry run, a
// few at a time, and records each outcome.
func (l *Locker) dryRun(ctx context.Context, runs []dryRun) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, dryRunConcurrency)
	for i := range runs {
		d := &runs[i]
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			data, err := d.obj.MarshalJSON()
			if err == nil {
				force := true
				_, err = resourceOf(l.client, d.ref).Patch(ctx, d.ref.Name, types.ApplyPatchType, data, metav1.PatchOptions{
					FieldManager: l.engine.fieldManager, Force: &force, DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			}
			d.err = err
		})
	}
	wg.Wait()
}

// declaredTypes returns the kinds whose CRDs objs declare, and the
// namespaces objs declare.
func declaredTypes(objs []*unstructured.Unstructured) (map[schema.GroupKind]bool, map[string]bool) {
	crds, namespaces := map[schema.GroupKind]bool{}, map[string]bool{}
	for _, obj := range objs {
		switch obj.GroupVersionKind().GroupKind() {
		case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
			group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
			crds[schema.GroupKind{Group: group, Kind: kind}] = true
		case schema.GroupKind{Kind: "Namespace"}:
			namespaces[obj.GetName()] = true
		}
	}
	return crds, namespaces
}

// checkIgnore refuses ignore rules whose paths are not JSON pointers.
func checkIgnore(rules []IgnoreRule) error {
	var errs []error
	for i, r := range rules {
		for _, p := range r.Paths {
			if _, err := ParsePointer(p); err != nil {
				errs = append(errs, fmt.Errorf("ignore rule %d: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}
