package engine

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

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
				mine := e.resolveKnown(sets[i].objects, sets[i].spec)
				mu.Lock()
				maps.Copy(resolved, mine)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return resolved
}

// resolveKnown resolves those of objects whose merge rules are read,
// without e.mu: for resolveAll, and for Declare before it takes the lock.
// Resolving packs each declaration (see pack), a few milliseconds for a
// release of 50 objects, and the callers that declare many sets at once
// (a start, a burst) declare them from many goroutines, which the lock
// would have taken one at a time. Objects whose rules are read meanwhile
// are resolved under the lock.
func (e *Engine) resolveKnown(objects []*unresolvedObject, spec ObjectSet) map[*unresolvedObject]resolution {
	var resolved map[*unresolvedObject]resolution
	for _, u := range objects {
		if e.schemas.known(u.obj.GroupVersionKind().GroupVersion()) {
			if resolved == nil {
				resolved = make(map[*unresolvedObject]resolution, len(objects))
			}
			obj, err := e.resolve(u.obj, spec)
			resolved[u] = resolution{obj: obj, err: err}
		}
	}
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
		obj.set = s
		if !s.objects.add(obj) {
			still = append(still, &unresolvedObject{obj: u.obj, err: fmt.Errorf("%s is declared twice", obj.ref())})
			continue
		}
		if old != nil {
			if prev := old.objects.get(obj.ref()); prev != nil && prev.digest == obj.digest {
				obj.applying = prev.applying
			}
		}
		s.dirty[obj.ref()] = e.now().UnixNano()
		if from := e.ownLocked(key, s, obj.ref()); from != "" {
			notify = append(notify, from)
		}
		if s.gvrs[obj.ref().GVR] == 0 {
			s.gvrs[obj.ref().GVR] = 1
			acquire = append(acquire, obj.ref().GVR)
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
	declaredAt, err := packKept(declared)
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
		generation: e.generations.Add(1),
		metadata:   e.internHeld(declared),
		digest:     digestOf(kept(declaredAt)),
		rank:       uint8(CreationOrder(gvk.GroupKind())),
		applying:   !spec.Applied,
		// The first check is fresh anyway; an object that check finds
		// in line, from the cache, is in line by these rules.
		rulesSeen: rulesSeen,
	}
	locked.setRef(ObjectRef{GVR: mapping.Resource, Namespace: declared.GetNamespace(), Name: declared.GetName()})
	if len(ignore) > 0 {
		locked.extras = &declaredExtras{ignore: ignore}
	}
	locked.declared.Store(declaredAt)
	locked.fresh = true
	if needsProof(spec, obj) {
		locked.proof = &proof{Unverified: Unverified{Ref: locked.ref(), Kind: gvk.Kind}}
		locked.setFlag(flagUnproved, true)
		if f := spec.Verify.Fallback; f != nil {
			if held := f(obj); held != nil {
				held = normalize(held)
				held.SetNamespace(declared.GetNamespace())
				fallback, err := packDeclaration(held)
				if err != nil {
					return nil, &ObjectError{Ref: locked.ref(), Err: err}
				}
				if locked.extras == nil {
					locked.extras = &declaredExtras{}
				}
				locked.extras.fallback = fallback
			}
		}
	}
	return locked, nil
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
