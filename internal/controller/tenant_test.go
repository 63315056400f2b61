package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// TestPermits holds the ServiceAccount opt-in to the names it lists.
func TestPermits(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  bool
	}{
		{"", false}, {"app", true}, {"other", false}, {"other, app", true}, {"*", true}, {"ap", false}, {"app2,apps", false},
	} {
		if got := permits(tt.value, "app"); got != tt.want {
			t.Errorf("permits(%q, app) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// TestJudgesFor: Prevent judges for a tenant's lock only what carries its
// marker and not Helm's ownership; for an admin's lock, all it holds.
func TestJudgesFor(t *testing.T) {
	c := &Controller{cfg: Config{Namespace: "reg"}}
	object := func(annotations map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "team"}}}
		u.SetAnnotations(annotations)
		return u
	}
	marked := map[string]string{mlv1.MarkerAnnotation: "team/app"}
	helm := map[string]string{mlv1.MarkerAnnotation: "team/app", "meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "team"}
	tenant, admin := manifestLockKey("team", "app"), manifestLockKey("reg", "app")
	for _, k := range []lockKey{tenant, admin, helmReleaseKey("reg", "web")} {
		declared(c, k)
	}
	for _, tt := range []struct {
		name     string
		key      lockKey
		old, obj *unstructured.Unstructured
		want     bool
	}{
		{"an admin's ManifestLock", admin, object(nil), object(nil), true},
		{"a HelmRelease", helmReleaseKey("reg", "web"), object(nil), object(nil), true},
		{"a set no longer held", manifestLockKey("reg", "gone"), object(nil), object(nil), false},
		{"the tenant's own object", tenant, object(marked), object(nil), true},
		{"an update that drops the marker", tenant, object(marked), object(nil), true},
		{"an object without the marker", tenant, object(nil), object(marked), false},
		{"another lock's marker", tenant, object(map[string]string{mlv1.MarkerAnnotation: "team/other"}), object(nil), false},
		{"installed by Helm, marker and all", tenant, object(helm), object(helm), false},
		{"deleted: the object as it was", tenant, object(marked), nil, true},
		{"created without the marker", tenant, nil, object(nil), false},
		{"created by Helm", tenant, nil, object(helm), false},
		{"created with the marker", tenant, nil, object(marked), true},
	} {
		if got := c.judgesFor(tt.key.String(), tt.old, tt.obj); got != tt.want {
			t.Errorf("%s: judgesFor = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestAppearedUnmade: an object the lock was to create that someone else
// made (it exists and differs) sends a tenant's lock back to decide
// whether it may hold it; the lock's own creation does not.
func TestAppearedUnmade(t *testing.T) {
	rb := engine.ObjectRef{GVR: schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, Namespace: "team", Name: "viewers"}
	st := &manifestState{missing: map[mlv1.ObjectRef]bool{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding", Namespace: "team", Name: "viewers"}: true}}
	created := engine.Result{Drifts: []engine.Drift{{Ref: rb, Kind: "RoleBinding", Deleted: true, Corrected: true}}}
	if appearedUnmade(st, created) {
		t.Error("appearedUnmade of the lock's own creation = true")
	}
	made := engine.Result{Drifts: []engine.Drift{{Ref: rb, Kind: "RoleBinding", Paths: []string{"/metadata/annotations/helm-locker.io~1manifest-lock"}}}}
	if !appearedUnmade(st, made) {
		t.Error("appearedUnmade of an object someone else made = false")
	}
	if appearedUnmade(&manifestState{}, made) {
		t.Error("appearedUnmade of an object the lock did not wait for = true")
	}
}

// TestTenantWriteGuard: a tenant's lock writes over a live object only if
// it carries the lock's marker, or is the very object the lock adopted,
// and never one that carries Helm's release annotation; it creates what
// is missing.
func TestTenantWriteGuard(t *testing.T) {
	ml := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}}
	guard := tenantWriteGuard(ml, map[types.UID]bool{"adopted": true})
	live := func(uid types.UID, annotations map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "team"}}}
		u.SetUID(uid)
		u.SetAnnotations(annotations)
		return u
	}
	marked := map[string]string{mlv1.MarkerAnnotation: "team/app"}
	helm := map[string]string{mlv1.MarkerAnnotation: "team/app", storage.AnnotationReleaseName: "web", storage.AnnotationReleaseSpace: "team"}
	for _, tt := range []struct {
		name string
		live *unstructured.Unstructured
		want string // the NotHeldError's reason; "" for a write let through
	}{
		{"a create", nil, ""},
		{"the lock's own object", live("made", marked), ""},
		{"the object the lock adopted", live("adopted", nil), ""},
		{"made by someone else since", live("other", nil), mlv1.ReasonNotMarked},
		{"another lock's marker", live("other", map[string]string{mlv1.MarkerAnnotation: "team/other"}), mlv1.ReasonNotMarked},
		{"installed by Helm, marker and all", live("made", helm), mlv1.ReasonInstalledByHelm},
		{"the adopted object, taken over by Helm", live("adopted", map[string]string{storage.AnnotationReleaseName: "web"}), mlv1.ReasonInstalledByHelm},
	} {
		err := guard(context.Background(), engine.Write{Live: tt.live})
		var notHeld *NotHeldError
		got := ""
		if errors.As(err, &notHeld) {
			got = notHeld.Reason
		} else if err != nil {
			t.Errorf("%s: %v, want a *NotHeldError or nil", tt.name, err)
		}
		if got != tt.want {
			t.Errorf("%s: refused as %q, want %q (%v)", tt.name, got, tt.want, err)
		}
	}
}

// TestTenantLockDoesNotWriteOverHelm: a tenant's lock declared a
// ConfigMap that did not exist; before its sync, an admin's Helm release
// created one of that name. The sync writes nothing to it, says why, and
// sends the lock back to decide what it holds.
func TestTenantLockDoesNotWriteOverHelm(t *testing.T) {
	c, dyn := newTestController(t, helmRelease(nil), nil, func(dyn *dynamicfake.FakeDynamicClient) {
		cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cm", "namespace": "team", "uid": "helm-made",
				"annotations": map[string]any{storage.AnnotationReleaseName: "web", storage.AnnotationReleaseSpace: "team"}},
			"data": map[string]any{"key": "admin"}}}
		if err := dyn.Tracker().Add(cm); err != nil {
			t.Fatal(err)
		}
	})
	ml := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}}
	objs, err := manifest.Parse(strings.NewReader(manifestYAML))
	if err != nil {
		t.Fatal(err)
	}
	key := manifestLockKey("team", "app").String()
	// As declared when the ConfigMap was missing.
	c.engine.Declare(key, c.manifestSet(ml, holding{objs: objs}, "team", nil, nil, false))
	dyn.ClearActions()
	res, err := c.engine.Sync(context.Background(), key)
	var notHeld *NotHeldError
	if !errors.As(err, &notHeld) || notHeld.Reason != mlv1.ReasonInstalledByHelm || !strings.Contains(err.Error(), "Helm release team/web") {
		t.Errorf("Sync = %v; want a NotHeldError, %s, naming the release", err, mlv1.ReasonInstalledByHelm)
	}
	for _, a := range dyn.Actions() {
		if p, ok := a.(clienttesting.PatchActionImpl); ok && len(p.PatchOptions.DryRun) > 0 {
			continue
		}
		if a.GetResource() == cmGVR && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("the lock wrote the ConfigMap Helm installed: %s %v", a.GetVerb(), a)
		}
	}
	if !writeRefused(res) {
		t.Error("writeRefused = false; want the lock to decide again what it holds")
	}
	if got := notLocked(nil, 0, res, err); len(got) != 1 || got[0].Reason != mlv1.ReasonInstalledByHelm {
		t.Errorf("notLocked = %+v; want the ConfigMap as %s", got, mlv1.ReasonInstalledByHelm)
	}
}

// TestHeldObjectsReadsEachObjectOnce: a tenant's declaration decides what
// it holds and what it is to create from one read of each object; an
// admin's reads only what is not in its inventory, and a replica standing
// by reads nothing of it.
func TestHeldObjectsReadsEachObjectOnce(t *testing.T) {
	metaScheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(metaScheme)
	existing := func(name string, annotations map[string]string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(name), Annotations: annotations}}
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	ref := func(name string) mlv1.ObjectRef {
		return mlv1.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: name}
	}
	var text string
	for _, name := range []string{"missing", "marked", "helm", "made"} {
		text += "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"
	}
	for _, tt := range []struct {
		name        string
		namespace   string // of the lock
		readOnly    bool
		wantReads   int
		wantHeld    []string
		wantUnheld  []string
		wantMissing []string
	}{
		{name: "tenant", namespace: "team", wantReads: 4, wantHeld: []string{"missing", "marked", "made"}, wantUnheld: []string{"ConfigMap team/helm"}, wantMissing: []string{"missing"}},
		{name: "admin", namespace: "reg", wantReads: 3, wantHeld: []string{"missing", "marked", "helm", "made"}, wantMissing: []string{"missing"}},
		{name: "admin standing by", namespace: "reg", readOnly: true, wantReads: 0, wantHeld: []string{"missing", "marked", "helm", "made"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			metaClient := metadatafake.NewSimpleMetadataClient(metaScheme,
				existing("marked", map[string]string{mlv1.MarkerAnnotation: tt.namespace + "/app"}),
				existing("helm", map[string]string{storage.AnnotationReleaseName: "web", storage.AnnotationReleaseSpace: "team"}),
				existing("made", map[string]string{mlv1.MarkerAnnotation: tt.namespace + "/app"}))
			dyn := dynamicfake.NewSimpleDynamicClient(scheme.Scheme)
			c := &Controller{cfg: Config{Namespace: "reg", ReadOnly: tt.readOnly, Metadata: metaClient, Dynamic: dyn, Mapper: resettable{mapper}, Recorder: noEvents{}}}
			c.readOnly.Store(tt.readOnly)
			ml := &mlv1.ManifestLock{ObjectMeta: metav1.ObjectMeta{Namespace: tt.namespace, Name: "app"}}
			objs, err := manifest.Parse(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			refs := map[mlv1.ObjectRef]bool{}
			for _, o := range objs {
				refs[ref(o.GetName())] = true
			}
			h, err := c.heldObjects(context.Background(), ml, objs, refs, "team", nil, []mlv1.ObjectRef{ref("made")})
			if err != nil {
				t.Fatal(err)
			}
			var held, unheld, missing []string
			for _, o := range h.objs {
				held = append(held, o.GetName())
			}
			for _, p := range h.unheld {
				unheld = append(unheld, p.Object)
			}
			for r := range h.missing {
				missing = append(missing, r.Name)
			}
			if diff := cmp.Diff(tt.wantHeld, held); diff != "" {
				t.Errorf("held (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantUnheld, unheld); diff != "" {
				t.Errorf("not held (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantMissing, missing); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
			if n := len(metaClient.Actions()) + len(dyn.Actions()); n != tt.wantReads {
				t.Errorf("%d requests (%v, %v); want %d, one read of each object", n, metaClient.Actions(), dyn.Actions(), tt.wantReads)
			}
		})
	}
}

// recordingMetadata is a metadata client that keeps the context of each
// GET.
type recordingMetadata struct {
	metadata.Interface
	contexts *[]context.Context
}

func (m recordingMetadata) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return recordingGetter{m.Interface.Resource(gvr), m.contexts}
}

type recordingGetter struct {
	metadata.Getter
	contexts *[]context.Context
}

func (g recordingGetter) Namespace(ns string) metadata.ResourceInterface {
	return recordingResource{g.Getter.Namespace(ns), g.contexts}
}

type recordingResource struct {
	metadata.ResourceInterface
	contexts *[]context.Context
}

func (r recordingResource) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	*r.contexts = append(*r.contexts, ctx)
	return r.ResourceInterface.Get(ctx, name, opts, sub...)
}

// TestJudgesScaleForReadsWithinTheReview: the read a tenant's scale
// judgement makes is bounded by the review's context, not by one of its
// own.
func TestJudgesScaleForReadsWithinTheReview(t *testing.T) {
	metaScheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(metaScheme)
	deploy := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Annotations: map[string]string{mlv1.MarkerAnnotation: "team/app"}}}
	var contexts []context.Context
	c := &Controller{cfg: Config{Namespace: "reg", Metadata: recordingMetadata{metadatafake.NewSimpleMetadataClient(metaScheme, deploy), &contexts}}}
	type reviewKey struct{}
	ctx := context.WithValue(context.Background(), reviewKey{}, "review")
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	if !c.judgesScaleFor(ctx, declared(c, manifestLockKey("team", "app")), gvr, "team", "web") {
		t.Error("judgesScaleFor the tenant's own Deployment = false")
	}
	if len(contexts) != 1 || contexts[0].Value(reviewKey{}) != "review" {
		t.Errorf("the read took contexts %v; want one, within the review's", contexts)
	}
	if _, ok := contexts[0].Deadline(); !ok {
		t.Error("the read has no deadline; want it bounded by scaleJudgeTimeout")
	}
}
