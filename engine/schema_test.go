package engine

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"
)

// servedDocs is an API server's /openapi/v3 as a test sets it.
type servedDocs struct {
	mu    sync.Mutex
	docs  map[string]string // by path, as "apis/group/version"
	paths int               // requests for the list of documents
	err   error
}

func (s *servedDocs) PathsWithContext(context.Context) (map[string]openapi.GroupVersionWithContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths++
	if s.err != nil {
		return nil, s.err
	}
	out := map[string]openapi.GroupVersionWithContext{}
	for path, doc := range s.docs {
		out[path] = servedDoc(doc)
	}
	return out, nil
}

func (s *servedDocs) serve(path, doc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[path] = doc
}

type servedDoc string

func (d servedDoc) SchemaWithContext(context.Context, string) ([]byte, error) { return []byte(d), nil }

// ServerRelativeURL carries a hash of the document, as the API server's do.
func (d servedDoc) ServerRelativeURL() string {
	return fmt.Sprintf("/openapi/v3/x?hash=%x", sha256.Sum256([]byte(d)))
}

// gizmoDoc is the OpenAPI v3 document the API server publishes for a CRD
// whose schema marks spec.selector as an atomic map and spec.ports as a
// map list keyed by port and protocol.
const gizmoDoc = `{"components":{"schemas":{"com.example.v1.Gizmo":{
  "type":"object",
  "x-kubernetes-group-version-kind":[{"group":"example.com","version":"v1","kind":"Gizmo"}],
  "properties":{
    "apiVersion":{"type":"string"},"kind":{"type":"string"},
    "metadata":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
    "spec":{"type":"object","properties":{
      "selector":{"type":"object","additionalProperties":{"type":"string"},"x-kubernetes-map-type":"atomic"},
      "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["port","protocol"],
        "items":{"type":"object","required":["port","protocol"],"properties":{
          "port":{"type":"integer"},"protocol":{"type":"string"},"target":{"type":"integer"},"name":{"type":"string"}}}}}}}}}}}`

var gizmoGV = schema.GroupVersion{Group: "example.com", Version: "v1"}

// gizmoDeclared is a Gizmo as a manifest declares it, and gizmoStored the
// same as the API server stores it: defaulted and other actors' fields
// beside the declared ones.
const (
	gizmoDeclared = `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, labels: {app: g}}
spec:
  selector: {app: g}
  ports: [{port: 53, protocol: UDP}]`
	gizmoStored = `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, uid: u1, labels: {app: g, other: x}}
spec:
  selector: {app: g}
  ports: [{port: 53, protocol: UDP, target: 53}]
  size: 3`
)

// servedGizmoRules returns the rules gizmoDoc gives, read as the locker
// reads an API server's document.
func servedGizmoRules(t *testing.T) mergeRules {
	t.Helper()
	docs := &servedDocs{docs: map[string]string{"apis/example.com/v1": gizmoDoc}}
	served := newSchemas(docs, time.Now)
	served.load(t.Context(), []schema.GroupVersion{gizmoGV})
	rules := served.rules(gizmoGV)
	if rules.types == deducedTypes {
		t.Fatal("the served rules did not load")
	}
	return rules
}

// TestRulesAreTheAPIServers holds custom resources to the list and map
// types their CRD declares, as the API server publishes them, where the
// deduced rules would take an atomic map entry by entry and a map list by
// position.
func TestRulesAreTheAPIServers(t *testing.T) {
	declared := obj(t, `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, namespace: ns}
spec:
  selector: {app: g}
  ports:
  - {port: 53, protocol: UDP, target: 53}
  - {port: 53, protocol: TCP, target: 53}`)
	tests := []struct {
		name       string
		live, want string
	}{{
		name: "a key added to an atomic map is removed",
		live: `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, namespace: ns}
spec:
  selector: {app: g, tier: any}
  ports:
  - {port: 53, protocol: UDP, target: 53}
  - {port: 53, protocol: TCP, target: 53}`,
		want: `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, namespace: ns}
spec:
  selector: {app: g}
  ports:
  - {port: 53, protocol: UDP, target: 53}
  - {port: 53, protocol: TCP, target: 53}`,
	}, {
		name: "entries are matched by all their keys; what is set beside the declared fields stays",
		live: `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, namespace: ns}
spec:
  selector: {app: g}
  ports:
  - {port: 53, protocol: TCP, target: 5353, name: dns-tcp}
  - {port: 53, protocol: UDP, target: 53}
  - {port: 54, protocol: UDP, target: 54}`,
		want: `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, namespace: ns}
spec:
  selector: {app: g}
  ports:
  - {port: 53, protocol: UDP, target: 53}
  - {port: 53, protocol: TCP, target: 53, name: dns-tcp}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs := &servedDocs{docs: map[string]string{"apis/example.com/v1": gizmoDoc}}
			s := newSchemas(docs, time.Now)
			if retry := s.load(t.Context(), []schema.GroupVersion{gizmoGV}); retry != 0 {
				t.Fatalf("load asks to retry in %s; the document is served", retry)
			}
			got, err := s.rules(gizmoGV).desired(obj(t, tt.live), declared)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(obj(t, tt.want), got); diff != "" {
				t.Errorf("desired (-want +got):\n%s", diff)
			}
			// Without the document, the deduced rules keep the
			// added key, or replace the whole list.
			deduced, err := newSchemas(nil, time.Now).rules(gizmoGV).desired(obj(t, tt.live), declared)
			if err != nil {
				t.Fatal(err)
			}
			if cmp.Equal(deduced, got) {
				t.Errorf("the deduced rules give the same answer; the case does not tell the API server's rules from them")
			}
		})
	}
}

func TestSchemasLoad(t *testing.T) {
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	core := schema.GroupVersion{Version: "v1"}
	docs := &servedDocs{docs: map[string]string{}}
	s := newSchemas(docs, now)
	ctx := t.Context()

	// A CRD's document follows the CRD by a moment: asked again soon,
	// with the deduced rules meanwhile.
	if got := s.load(ctx, []schema.GroupVersion{gizmoGV}); got != unpublishedRetry {
		t.Errorf("retry while unpublished = %s, want %s", got, unpublishedRetry)
	}
	if s.rules(gizmoGV).types != deducedTypes {
		t.Errorf("rules while unpublished are not the deduced rules")
	}
	if got := s.load(ctx, []schema.GroupVersion{gizmoGV}); got != unpublishedRetry || docs.paths != 1 {
		t.Errorf("load before the retry time: retry %s after %d requests, want %s after 1", got, docs.paths, unpublishedRetry)
	}
	docs.serve("apis/example.com/v1", gizmoDoc)
	clock = clock.Add(unpublishedRetry)
	if got := s.load(ctx, []schema.GroupVersion{gizmoGV}); got != 0 {
		t.Errorf("retry once published = %s, want 0", got)
	}
	if s.rules(gizmoGV).types == deducedTypes {
		t.Errorf("rules once published are still the deduced rules")
	}

	// Loaded rules are not asked for again.
	n := docs.paths
	s.load(ctx, []schema.GroupVersion{gizmoGV})
	if docs.paths != n {
		t.Errorf("loaded rules were fetched again")
	}

	// A document never published stops being asked for soon.
	other := schema.GroupVersion{Group: "gone.example.com", Version: "v1"}
	for range int(unpublishedFor/unpublishedRetry) + 1 {
		s.load(ctx, []schema.GroupVersion{other})
		clock = clock.Add(unpublishedRetry)
	}
	if got := s.load(ctx, []schema.GroupVersion{other}); got != 0 {
		t.Errorf("retry after %s unpublished = %s, want 0", unpublishedFor, got)
	}

	// A failure keeps the fallback rules and is tried again rarely.
	docs.err = fmt.Errorf("forbidden")
	if got := s.load(ctx, []schema.GroupVersion{core}); got != 0 {
		t.Errorf("retry after a failure = %s, want 0", got)
	}
	if s.rules(core).types != builtinTypes() {
		t.Errorf("a built-in group version without its document does not fall back to client-go's schema")
	}
	n = docs.paths
	clock = clock.Add(failedRetry - time.Second)
	s.load(ctx, []schema.GroupVersion{core})
	if docs.paths != n {
		t.Errorf("a failed load was tried again before %s", failedRetry)
	}

	// After a CRD change, a document is read again only if its hash
	// moved, and the rules in use stay meanwhile.
	docs.err = nil
	_, before := s.rulesAt(gizmoGV)
	s.forget()
	if s.rules(gizmoGV).types == deducedTypes {
		t.Errorf("rules fell back while a CRD change was looked into")
	}
	s.load(ctx, []schema.GroupVersion{gizmoGV})
	if _, after := s.rulesAt(gizmoGV); after != before {
		t.Errorf("rules changed (%d to %d) with the document the same", before, after)
	}
	docs.serve("apis/example.com/v1", strings.Replace(gizmoDoc, `"x-kubernetes-map-type":"atomic"`, `"x-kubernetes-map-type":"granular"`, 1))
	s.forget()
	s.load(ctx, []schema.GroupVersion{gizmoGV})
	_, after := s.rulesAt(gizmoGV)
	if after == before {
		t.Errorf("rules did not change with the document")
	}
	// A document gone (the CRD was deleted) leaves the last rules.
	delete(docs.docs, "apis/example.com/v1")
	s.forget()
	s.load(ctx, []schema.GroupVersion{gizmoGV})
	if r, now := s.rulesAt(gizmoGV); r.types == deducedTypes || now != after {
		t.Errorf("rules changed when the document went")
	}
}

// TestDeclaredIn takes the declared fields from a dry run's answer by
// either kind of rules: the deduced rules' values do not extract with
// structured-merge-diff, which gave their maps back empty.
func TestDeclaredIn(t *testing.T) {
	declared := obj(t, gizmoDeclared)
	out := obj(t, gizmoStored)
	want := obj(t, `
apiVersion: example.com/v1
kind: Gizmo
metadata: {name: g, labels: {app: g}}
spec:
  selector: {app: g}
  ports: [{port: 53, protocol: UDP, target: 53}]`)
	for name, rules := range map[string]mergeRules{"served": servedGizmoRules(t), "deduced": {types: deducedTypes}} {
		got, err := rules.declaredIn(declared, out)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s rules: declared fields (-want +got):\n%s", name, diff)
		}
	}
}

// configMapDoc is the API server's document for core/v1, cut to ConfigMap.
const configMapDoc = `{"components":{"schemas":{"io.k8s.api.core.v1.ConfigMap":{
  "type":"object",
  "x-kubernetes-group-version-kind":[{"group":"","version":"v1","kind":"ConfigMap"}],
  "properties":{
    "apiVersion":{"type":"string"},"kind":{"type":"string"},
    "metadata":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
    "data":{"type":"object","additionalProperties":{"type":"string"}}}}}}}`

// TestObjectsStartWithTheRulesTheyAreResolvedBy: an object is resolved,
// and its informer started, only once its kind's rules are read, so that
// an object the cache shows in line at its first check is in line by the
// rules that check uses, and its first drift is corrected by one PATCH.
// Declare used to resolve objects by the fallback rules before Sync read
// the server's, and every first revert was dry-run first, for a change of
// rules that had not been seen: make bench measured single reverts at
// 2.5x the floor.
func TestObjectsStartWithTheRulesTheyAreResolvedBy(t *testing.T) {
	docs := &servedDocs{docs: map[string]string{"api/v1": configMapDoc}}
	e, client, _ := newTestEngineWith(t, Options{OpenAPI: docs})
	live := configMap(t, "declared")
	live.SetNamespace("ns")
	if _, err := client.Resource(cmGVR).Namespace("ns").Create(t.Context(), live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{configMap(t, "declared")}, DefaultNamespace: "ns"})
	if n := len(e.sets["k"].objects); n != 0 {
		t.Fatalf("Declare resolved %d objects before their rules were read", n)
	}
	if res, err := e.Sync(t.Context(), "k"); err != nil || !res.InLine {
		t.Fatalf("first Sync = %+v, %v; want in line", res, err)
	}
	_, changes := e.schemas.rulesAt(schema.GroupVersion{Version: "v1"})
	obj := e.sets["k"].objects.get(ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"})
	if obj == nil || changes == 0 || obj.rulesSeen != changes {
		t.Fatalf("object %+v; the rules changed %d times", obj, changes)
	}
}

// TestPrepareTracksEverySet: Prepare reads the rules once for every
// declared set and resolves all their objects, so the informers' first
// lists keep every one. Without it only the first set to Sync was tracked
// when its informer listed, and every other set's first Sync read its
// objects with one GET each: make bench measured cold lock at 940
// objects/s, against 1650 with it.
func TestPrepareTracksEverySet(t *testing.T) {
	docs := &servedDocs{docs: map[string]string{"api/v1": configMapDoc}}
	e, _, _ := newTestEngineWith(t, Options{OpenAPI: docs})
	var refs []ObjectRef
	for _, key := range []string{"a", "b", "c"} {
		cm := configMap(t, "declared")
		cm.SetName("cm-" + key)
		e.Declare(key, ObjectSet{Objects: []*unstructured.Unstructured{cm}, DefaultNamespace: "ns-" + key})
		refs = append(refs, ObjectRef{GVR: cmGVR, Namespace: "ns-" + key, Name: "cm-" + key})
	}
	for _, ref := range refs {
		if e.tracked(ref.GVR, ref.Namespace, ref.Name) {
			t.Fatalf("%s is tracked before its rules are read", ref)
		}
	}
	e.Prepare(t.Context())
	for _, ref := range refs {
		if !e.tracked(ref.GVR, ref.Namespace, ref.Name) {
			t.Errorf("%s is not tracked after Prepare", ref)
		}
	}
	if docs.paths != 1 {
		t.Errorf("Prepare listed the documents %d times; want once for all sets", docs.paths)
	}
}

// TestPrepareResolvesSetsAtOnce: Prepare resolves the sets declared at
// startup on several cores, outside the engine's lock, and never calls one
// set's callbacks at once. Each set's Ignore waits until another set's is
// running too: resolved one by one, under the lock, none would ever see
// that, and each would wait out its timeout.
func TestPrepareResolvesSetsAtOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	docs := &servedDocs{docs: map[string]string{"api/v1": configMapDoc}}
	e, _, _ := newTestEngineWith(t, Options{OpenAPI: docs})
	var (
		inFlight atomic.Int32
		together = make(chan struct{})
		once     sync.Once
		overlap  atomic.Bool
	)
	var refs []ObjectRef
	for i := range 8 {
		key := fmt.Sprintf("set-%d", i)
		var mine atomic.Int32
		var objs []*unstructured.Unstructured
		for j := range 3 {
			cm := configMap(t, "declared")
			cm.SetName(fmt.Sprintf("cm-%d", j))
			objs = append(objs, cm)
			refs = append(refs, ObjectRef{GVR: cmGVR, Namespace: "ns-" + key, Name: cm.GetName()})
		}
		ignore := func(*unstructured.Unstructured) []Pointer {
			if mine.Add(1) > 1 {
				overlap.Store(true)
			}
			defer mine.Add(-1)
			if inFlight.Add(1) > 1 {
				once.Do(func() { close(together) })
			}
			defer inFlight.Add(-1)
			select {
			case <-together:
			case <-time.After(2 * time.Second):
			}
			return nil
		}
		e.Declare(key, ObjectSet{Objects: objs, DefaultNamespace: "ns-" + key, Ignore: ignore})
	}
	e.Prepare(t.Context())
	select {
	case <-together:
	default:
		t.Error("no two sets were resolved at once")
	}
	if overlap.Load() {
		t.Error("one set's Ignore was called while it was running")
	}
	for _, ref := range refs {
		if !e.tracked(ref.GVR, ref.Namespace, ref.Name) {
			t.Errorf("%s is not tracked after Prepare", ref)
		}
	}
}
