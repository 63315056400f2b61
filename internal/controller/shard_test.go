package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

const shardLabel = "sharding.helm-locker.io/shard"

// inShard configures a controller that serves shard a.
func inShard(cfg *Config) { cfg.Selector = labels.SelectorFromSet(labels.Set{shardLabel: "a"}) }

// labelled returns obj with the shard label set to shard.
func labelled(obj *unstructured.Unstructured, shard string) *unstructured.Unstructured {
	obj.SetLabels(map[string]string{shardLabel: shard})
	return obj
}

// apiServerPatchErrors makes the fake answer a JSON patch whose test
// fails as the API server does: 422, with its own message and no causes
// (k8s.io/apiserver, endpoints/handlers/patch.go). The fake returns the
// library's error as it is.
func apiServerPatchErrors(dyn *dynamicfake.FakeDynamicClient) {
	tracker := clienttesting.ObjectReaction(dyn.Tracker())
	dyn.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := tracker(a)
		if errors.Is(err, jsonpatch.ErrTestFailed) {
			return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
		return handled, obj, err
	})
}

// writes lists the writes the fake was sent, as "verb resource/subresource".
func writes(dyn *dynamicfake.FakeDynamicClient) []string {
	var got []string
	for _, a := range dyn.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete", "delete-collection":
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	return got
}

// TestShardWatchesItsCRsOnly: the CR informers list and watch with the
// selector, so the API server never sends another shard's CRs.
func TestShardWatchesItsCRsOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ml := func(name, shard string) *unstructured.Unstructured {
		return labelled(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
			"metadata": map[string]any{"name": name, "namespace": "cattle-helm-system"},
		}}, shard)
	}
	hrB := labelled(helmRelease(nil), "b")
	hrB.SetName("hr-b")
	c, dyn := newTestControllerWith(t, inShard, labelled(helmRelease(nil), "a"), nil, func(dyn *dynamicfake.FakeDynamicClient) {
		for _, obj := range []*unstructured.Unstructured{hrB, ml("ml-a", "a"), ml("ml-b", "b")} {
			gvr := v1alpha1.Resource
			if obj.GetKind() == mlv1.Kind {
				gvr = mlv1.Resource
			}
			if err := dyn.Tracker().Create(gvr, obj, obj.GetNamespace()); err != nil {
				t.Fatal(err)
			}
		}
	})
	go c.locks.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.locks.HasSynced) {
		t.Fatal("caches did not sync")
	}
	for _, a := range dyn.Actions() {
		r := a.GetResource()
		if (a.GetVerb() != "list" && a.GetVerb() != "watch") || (r != v1alpha1.Resource && r != mlv1.Resource) {
			continue
		}
		var selector labels.Selector
		switch a := a.(type) {
		case clienttesting.ListAction:
			selector = a.GetListRestrictions().Labels
		case clienttesting.WatchAction:
			selector = a.GetWatchRestrictions().Labels
		}
		if selector == nil || selector.String() != shardLabel+"=a" {
			t.Errorf("%s %s with selector %v, want %s=a", a.GetVerb(), r.Resource, selector, shardLabel)
		}
	}
	if keys := c.crs.GetIndexer().ListKeys(); len(keys) != 1 || keys[0] != "cattle-helm-system/hr" {
		t.Errorf("HelmReleases cached: %v, want only shard a's", keys)
	}
	if keys := c.locks.GetIndexer().ListKeys(); len(keys) != 1 || keys[0] != "cattle-helm-system/ml-a" {
		t.Errorf("ManifestLocks cached: %v, want only shard a's", keys)
	}
}

// TestHelmReleaseLeavingTheShardWritesNothing: a CR relabelled into
// another shard is, to this one, deleted: its lock opens, its admission
// is no longer this shard's to answer, and nothing is written, to the CR
// or the objects.
func TestHelmReleaseLeavingTheShardWritesNothing(t *testing.T) {
	ctx := context.Background()
	hr := labelled(helmRelease(map[string]any{v1alpha1.ManagedByAnnotation: "helm-locker"}), "a")
	hr.Object["spec"].(map[string]any)["mode"] = "Prevent"
	c, dyn := newTestControllerWith(t, inShard, hr, releaseSecret(t, "deployed", 1), nil)
	key := helmReleaseKey("cattle-helm-system", "hr")
	syncWatched(t, c)
	if st := statusOf(t, dyn); st.State != v1alpha1.StateDeployed {
		t.Fatalf("state %q before the move, want Deployed", st.State)
	}
	cm, err := dyn.Resource(cmGVR).Namespace("apps").Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := c.Judge(cmGVR, cm, nil); !j.Denied() {
		t.Fatal("the shard does not deny the deletion of what it holds")
	}

	// The API server's watch sends a CR that leaves the selector as a
	// deletion, and the informer drops it from the cache.
	deleteCR(t, c)
	dyn.ClearActions()
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := writes(dyn); len(got) > 0 {
		t.Errorf("the shard the CR left wrote %v", got)
	}
	if j, _ := c.Judge(cmGVR, cm, nil); j.Denied() {
		t.Errorf("the shard the CR left still denies the deletion of its objects: %+v", j)
	}
}

// TestSyncUnderWayWhenTheCRMovesWritesNoStatus: a CR relabelled while its
// sync runs is not written: the status write tests the labels the cache
// showed, and the sync comes back soon rather than fail.
func TestSyncUnderWayWhenTheCRMovesWritesNoStatus(t *testing.T) {
	ctx := context.Background()
	hr := labelled(helmRelease(map[string]any{v1alpha1.ManagedByAnnotation: "helm-locker"}), "a")
	c, dyn := newTestControllerWith(t, inShard, hr, releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
		apiServerPatchErrors(dyn)
		// Just before the status write, the CR moves to shard b.
		dyn.PrependReactor("patch", "helmreleases", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "status" {
				return false, nil, nil
			}
			obj, err := dyn.Tracker().Get(v1alpha1.Resource, "cattle-helm-system", "hr")
			if err != nil {
				return true, nil, err
			}
			moved := labelled(obj.(*unstructured.Unstructured).DeepCopy(), "b")
			return false, nil, dyn.Tracker().Update(v1alpha1.Resource, moved, "cattle-helm-system")
		})
	})
	res, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr"))
	if err != nil {
		t.Fatalf("sync: %v; a CR that may have left the shard is not an error", err)
	}
	if res.requeueAfter != labelsChangedRetry {
		t.Errorf("requeued after %s, want %s", res.requeueAfter, labelsChangedRetry)
	}
	if st := statusOf(t, dyn); st.State != "" {
		t.Errorf("status written after the CR moved: %+v", st)
	}
}

// TestStatusPatch holds the status write's guard to JSON patch as the API
// server applies it (the same library): a shard's write applies only
// while the CR's labels are those it read.
func TestStatusPatch(t *testing.T) {
	doc := func(labels map[string]string) []byte {
		meta := map[string]any{"name": "hr"}
		if labels != nil {
			meta["labels"] = labels
		}
		b, _ := json.Marshal(map[string]any{"metadata": meta, "status": map[string]any{"state": "old"}})
		return b
	}
	a, b := map[string]string{shardLabel: "a"}, map[string]string{shardLabel: "b"}
	tests := []struct {
		name    string
		read    map[string]string // the labels the cache showed
		live    map[string]string // the labels the CR has
		guarded bool
		want    bool // applied
	}{
		{"the labels read", a, a, true, true},
		{"relabelled into another shard", a, b, true, false},
		{"a label added", a, map[string]string{shardLabel: "a", "team": "x"}, true, false},
		{"no labels, still none", nil, nil, true, true},
		{"no labels, then some", nil, b, true, false},
		{"labels, then none", a, nil, true, false},
		{"unsharded: not guarded", a, b, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := statusPatch(map[string]any{"state": "new"}, tt.read, tt.guarded)
			if err != nil {
				t.Fatal(err)
			}
			p, err := jsonpatch.DecodePatch(patch)
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Apply(doc(tt.live))
			if applied := err == nil; applied != tt.want {
				t.Fatalf("applied = %v (%v), want %v; patch %s", applied, err, tt.want, patch)
			}
			if tt.want && !strings.Contains(string(out), `"state":"new"`) {
				t.Errorf("the status was not written: %s", out)
			}
			if !tt.want && !errors.Is(err, jsonpatch.ErrTestFailed) {
				t.Errorf("refused with %v, want the test to fail", err)
			}
		})
	}
}

// TestPatchTestFailed tells the API server's answer to a failed test from
// a status that does not validate.
func TestPatchTestFailed(t *testing.T) {
	failedTest := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", "testing value /metadata/labels failed: test failed", 0, false)
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.SchemeGroupVersion.Group, Kind: v1alpha1.Kind}, "hr",
		[]*field.Error{field.Invalid(field.NewPath("status", "state"), "Bogus", "unsupported value")})
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{failedTest, true},
		{invalid, false},
		{apierrors.NewConflict(v1alpha1.Resource.GroupResource(), "hr", errors.New("changed")), false},
		{errors.New("connection refused"), false},
	} {
		if got := patchTestFailed(tt.err); got != tt.want {
			t.Errorf("patchTestFailed(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestManifestLockLeavingTheShardPrunesNothing: a ManifestLock with
// spec.prune that leaves the shard (relabelled, and its manifest changed
// at once) deletes nothing and writes nothing there: what it created and
// no longer declares is for the shard that serves it now to prune.
func TestManifestLockLeavingTheShardPrunesNothing(t *testing.T) {
	ctx := context.Background()
	manifest := func(names ...string) string {
		var docs []string
		for _, n := range names {
			docs = append(docs, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+n+"\ndata:\n  key: declared\n")
		}
		return strings.Join(docs, "---\n")
	}
	lock := labelled(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": "ml", "namespace": "cattle-helm-system", "generation": int64(1)},
		"spec":     map[string]any{"namespace": "apps", "manifest": manifest("one", "two"), "prune": true},
	}}, "a")
	c, dyn := newManifestLockController(t, inShard, lock)
	key := manifestLockKey("cattle-helm-system", "ml")
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(mlv1.Resource).Namespace("cattle-helm-system").Get(ctx, "ml", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if inventory, _, _ := unstructured.NestedSlice(u.Object, "status", "inventory"); len(inventory) != 2 {
		t.Fatalf("inventory %v before the move, want the two ConfigMaps the lock created", inventory)
	}

	// Moved to shard b with a manifest that drops "two": shard a's cache
	// no longer has it.
	if err := c.locks.GetIndexer().Delete(lock); err != nil {
		t.Fatal(err)
	}
	dyn.ClearActions()
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := writes(dyn); len(got) > 0 {
		t.Errorf("the shard the ManifestLock left wrote %v", got)
	}
	if _, err := dyn.Resource(cmGVR).Namespace("apps").Get(ctx, "two", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap apps/two after the lock left the shard: %v, want it kept", err)
	}
}
