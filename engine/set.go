package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// SetOption configures a set passed to Locker.Lock.
type SetOption func(*setOptions)

type setOptions struct {
	namespace    string
	onDrift      func(Drift)
	ignore       []IgnoreRule
	ignoreFunc   func(*unstructured.Unstructured) []Pointer
	warnOnly     bool
	applyManager string
}

// DefaultNamespace gives namespaced objects that declare no namespace this
// one, as `kubectl apply -n` does. Without it such an object fails Lock.
func DefaultNamespace(namespace string) SetOption {
	return func(o *setOptions) { o.namespace = namespace }
}

// OnDrift calls f once for each drift someone else made, corrected or not,
// from the goroutine that synced the set: f must not block for long. The
// set's own writes are not drift and are not reported: what Lock and
// Update create or change to apply a new declaration (see Drift.Applying).
// A drift that stays (WarnOnly, a fight, a refused correction) is reported
// when found, and again only once it changes.
func OnDrift(f func(Drift)) SetOption {
	return func(o *setOptions) { o.onDrift = f }
}

// objectSet is the engine's declaration of objs under o; reportOnly makes
// it write nothing whatever o says.
func (o setOptions) objectSet(objs []*unstructured.Unstructured, reportOnly bool) ObjectSet {
	ignore := ignoreFunc(o.ignore)
	if o.ignoreFunc != nil {
		ignore = o.ignoreFunc
	}
	return ObjectSet{
		Objects:          objs,
		DefaultNamespace: o.namespace,
		ApplyManager:     o.applyManager,
		ReportOnly:       o.warnOnly || reportOnly,
		Ignore:           ignore,
	}
}

// IgnoreFunc leaves the fields f returns for each declared object (its
// namespace filled in) as they are live, for rules IgnoreRule cannot say.
// It replaces the rules of Ignore.
func IgnoreFunc(f func(declared *unstructured.Unstructured) []Pointer) SetOption {
	return func(o *setOptions) { o.ignoreFunc = f }
}

// IgnoreRule leaves fields of the objects it selects as they are live:
// neither compared nor reverted, as for fields another controller owns (a
// Deployment's replicas under an autoscaler). Empty selectors select every
// object.
type IgnoreRule struct {
	Group, Version, Kind string
	Namespace, Name      string
	// Paths are JSON pointers (RFC 6901) into the object, such as
	// /spec/replicas.
	Paths []string
}

// Ignore adds rules of fields left alone. A path that is not a JSON
// pointer fails Lock.
func Ignore(rules ...IgnoreRule) SetOption {
	return func(o *setOptions) { o.ignore = append(o.ignore, rules...) }
}

// WarnOnly makes the set report drift (see OnDrift and Diff) and never
// write.
func WarnOnly() SetOption {
	return func(o *setOptions) { o.warnOnly = true }
}

// ServerSideApply says the objects' owner writes them with server-side
// apply as manager (see ObjectSet.ApplyManager).
func ServerSideApply(manager string) SetOption {
	return func(o *setOptions) { o.applyManager = manager }
}

// Set is one named set of objects a Locker holds.
type Set struct {
	locker *Locker
	name   string
	opts   setOptions

	mu sync.Mutex
	// gen counts declarations: a Sync that began under an older one says
	// nothing about the current one.
	gen uint64
	// created are the objects the set created while applying a
	// declaration (see Created).
	created  []ObjectRef
	last     *Result
	lastErr  error
	unlocked bool
	// changed is closed, and replaced, whenever last changes.
	changed chan struct{}
}

// Name is the name the set was locked under.
func (s *Set) Name() string { return s.name }

// Result is where the set stood after its last sync; false before the
// first one of its current declaration.
func (s *Set) Result() (Result, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return Result{}, false
	}
	return *s.last, true
}

// Update makes objs the set's declaration, checked as Lock checks it.
// Objects no longer declared are left as they are.
func (s *Set) Update(ctx context.Context, objs []*unstructured.Unstructured) error {
	if err := s.locker.check(ctx, s.name, objs, s.opts); err != nil {
		return fmt.Errorf("set %s: %w", s.name, err)
	}
	s.mu.Lock()
	unlocked := s.unlocked
	s.mu.Unlock()
	if unlocked {
		return fmt.Errorf("set %s is unlocked", s.name)
	}
	s.declare(objs)
	return nil
}

// Unlock stops holding the set. Its objects stay as they are.
func (s *Set) Unlock() {
	l := s.locker
	l.mu.Lock()
	if l.sets[s.name] == s {
		delete(l.sets, s.name)
	}
	l.mu.Unlock()
	s.mu.Lock()
	s.unlocked = true
	s.mu.Unlock()
	l.engine.Forget(s.name)
}

// WaitLocked waits until every object of the set was seen as declared,
// after whatever corrections that took. It returns early with a
// *NotLockedError when an object cannot be held without a change of
// declaration or of the cluster (see Failure), and with ctx's error, saying
// what is still out of line, when ctx ends first.
func (s *Set) WaitLocked(ctx context.Context) error {
	for {
		s.mu.Lock()
		last, lastErr, changed, unlocked := s.last, s.lastErr, s.changed, s.unlocked
		s.mu.Unlock()
		if unlocked {
			return fmt.Errorf("set %s is unlocked", s.name)
		}
		if last != nil {
			if last.InLine && lastErr == nil {
				return nil
			}
			if err := notLocked(s.name, *last); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("set %s is not locked yet: %s: %w", s.name, pending(last, lastErr), ctx.Err())
		case <-changed:
		}
	}
}

// Diff compares every object of the set with the API server's copy, now,
// and returns those that are not as declared (see Engine.Diff).
func (s *Set) Diff(ctx context.Context) ([]ObjectDiff, error) {
	return s.locker.engine.Diff(ctx, s.name)
}

func (s *Set) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// declare hands objs to the engine and queues the set's first sync.
func (s *Set) declare(objs []*unstructured.Unstructured) {
	s.mu.Lock()
	s.gen++
	s.last, s.lastErr = nil, nil
	s.mu.Unlock()
	s.locker.engine.Declare(s.name, s.opts.objectSet(objs, false))
	s.locker.queue.Add(s.name)
}

// observe records the outcome of a sync that began at declaration gen and
// calls OnDrift for its drifts.
func (s *Set) observe(gen uint64, res Result, err error) {
	s.mu.Lock()
	if gen == s.gen {
		s.last, s.lastErr = &res, err
		close(s.changed)
		s.changed = make(chan struct{})
	}
	for _, d := range res.Drifts {
		if d.Applying && d.Deleted && d.Corrected && !slices.Contains(s.created, d.Ref) {
			s.created = append(s.created, d.Ref)
		}
	}
	s.mu.Unlock()
	if f := s.opts.onDrift; f != nil {
		for _, d := range res.Drifts {
			if !d.Applying && !d.Held {
				f(d)
			}
		}
	}
}

// Created lists the objects the set created because they were missing
// when it was locked or updated: an operator that prunes deletes only
// these, never an object the set adopted. It is kept in memory only; an
// operator that restarts keeps its own record.
func (s *Set) Created() []ObjectRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.created)
}

// NotLockedError says a set cannot be held as declared until its
// declaration or the cluster changes: the API server refuses an object's
// correction for good (see Failure) or the dry run that would check it
// (see Unchecked), an object cannot be placed, or another set holds it.
type NotLockedError struct {
	Set       string
	Failed    []Failure
	Unchecked []Unchecked
	Conflicts []Conflict
	// Invalid are objects that could not be resolved for a reason other
	// than a kind not yet served.
	Invalid []error
}

func (e *NotLockedError) Error() string {
	var parts []string
	for _, f := range e.Failed {
		parts = append(parts, fmt.Sprintf("%s: %s: %v", f.Ref, f.Reason, f.Err))
	}
	for _, u := range e.Unchecked {
		parts = append(parts, fmt.Sprintf("%s: differs at %s, and cannot be checked: %v", u.Ref, strings.Join(u.Paths, ", "), u.Err))
	}
	for _, c := range e.Conflicts {
		parts = append(parts, fmt.Sprintf("%s: held by set %s", c.Ref, c.Holder))
	}
	for _, err := range e.Invalid {
		parts = append(parts, err.Error())
	}
	return fmt.Sprintf("set %s cannot be locked: %s", e.Set, strings.Join(parts, "; "))
}

// notLocked returns the NotLockedError res shows, or nil.
func notLocked(set string, res Result) error {
	e := &NotLockedError{Set: set, Failed: res.Failed, Unchecked: res.Unchecked, Conflicts: res.Conflicts}
	for _, err := range res.Unresolved {
		var te *TypeError
		if !errors.As(err, &te) {
			e.Invalid = append(e.Invalid, err)
		}
	}
	if len(e.Failed) == 0 && len(e.Unchecked) == 0 && len(e.Conflicts) == 0 && len(e.Invalid) == 0 {
		return nil
	}
	return e
}

// pending says what keeps a set from being locked, for an error.
func pending(last *Result, err error) string {
	switch {
	case last == nil:
		return "not synced yet"
	case err != nil:
		return err.Error()
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("%d of %d objects in line", last.Locked, last.Objects))
	for _, err := range last.Unresolved {
		parts = append(parts, err.Error())
	}
	for _, f := range last.Fights {
		parts = append(parts, fmt.Sprintf("%s: in a fight with %s", f.Ref, managerNames(f.Managers)))
	}
	for _, w := range last.Waiting {
		parts = append(parts, fmt.Sprintf("%s: waiting for namespace %s", w.Ref, w.Namespace))
	}
	for _, gvr := range last.Unwatched {
		parts = append(parts, fmt.Sprintf("%s not watched yet", gvr.Resource))
	}
	return strings.Join(parts, "; ")
}

func managerNames(ms []Manager) string {
	if len(ms) == 0 {
		return "an unknown writer"
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return strings.Join(names, ", ")
}

// ignoreFunc turns rules into ObjectSet.Ignore. check has parsed every path.
func ignoreFunc(rules []IgnoreRule) func(*unstructured.Unstructured) []Pointer {
	if len(rules) == 0 {
		return nil
	}
	return func(obj *unstructured.Unstructured) []Pointer {
		gvk := obj.GroupVersionKind()
		var out []Pointer
		for _, r := range rules {
			if (r.Group == "" || r.Group == gvk.Group) && (r.Version == "" || r.Version == gvk.Version) &&
				(r.Kind == "" || r.Kind == gvk.Kind) && (r.Namespace == "" || r.Namespace == obj.GetNamespace()) &&
				(r.Name == "" || r.Name == obj.GetName()) {
				for _, text := range r.Paths {
					if p, err := ParsePointer(text); err == nil {
						out = append(out, p)
					}
				}
			}
		}
		return out
	}
}
