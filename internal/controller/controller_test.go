package controller

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/admission"
	"github.com/helm-locker/helm-locker/internal/storage"
)

type resettable struct{ meta.RESTMapper }

func (resettable) Reset() {}

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

const manifestYAML = "---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: declared\n"

// releaseSecret is a release Secret as Helm writes it.
func releaseSecret(t *testing.T, status string, version int) *corev1.Secret {
	t.Helper()
	return releaseSecretWith(t, status, version, func(map[string]any) {})
}

// releaseSecretWith is releaseSecret with its release changed by edit.
func releaseSecretWith(t *testing.T, status string, version int, edit func(rel map[string]any)) *corev1.Secret {
	t.Helper()
	rel := map[string]any{
		"name": "rel", "namespace": "apps", "version": version,
		"info":     map[string]any{"status": status, "description": "Install complete"},
		"manifest": manifestYAML,
	}
	edit(rel)
	raw, _ := json.Marshal(rel)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(raw)
	_ = zw.Close()
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "sh.helm.release.v1.rel.v" + strconv.Itoa(version), Namespace: "apps", UID: types.UID("uid-" + status), ResourceVersion: "1",
			Labels: map[string]string{"owner": "helm", "name": "rel", "status": status, "version": strconv.Itoa(version)},
		},
		Type: storage.SecretType,
		Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))},
	}
}

func helmRelease(annotations map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.cattle.io/v1alpha1", "kind": "HelmRelease",
		"metadata": map[string]any{"name": "hr", "namespace": "cattle-helm-system", "generation": int64(1), "annotations": annotations},
		"spec":     map[string]any{"release": map[string]any{"name": "rel", "namespace": "apps"}},
	}}
}

// newTestController builds a controller on fake clients and runs its
// informers, so sync can be driven one call at a time. setup, if set,
// prepares the dynamic client before anything uses it: the fake's reactors
// may not change while informers call it.
func newTestController(t *testing.T, hr *unstructured.Unstructured, secret *corev1.Secret, setup func(*dynamicfake.FakeDynamicClient)) (*Controller, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	return newTestControllerWith(t, nil, hr, secret, setup)
}

// newTestControllerWith is newTestController with configure, if set,
// changing the controller's Config before it is built.
func newTestControllerWith(t *testing.T, configure func(*Config), hr *unstructured.Unstructured, secret *corev1.Secret, setup func(*dynamicfake.FakeDynamicClient)) (*Controller, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	// The dynamic fake holds every object unstructured, as the dynamic
	// client sends it: with client-go's scheme its tracker lists
	// ConfigMaps as typed ones, and fails on one the lock created.
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		cmGVR:                                "ConfigMapList",
		{Version: "v1", Resource: "secrets"}: "SecretList",
		{Group: "apps", Version: "v1", Resource: "deployments"}:                       "DeploymentList",
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}: "RoleBindingList",
		v1alpha1.Resource: "HelmReleaseList",
		mlv1.Resource:     "ManifestLockList",
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}: "CustomResourceDefinitionList",
	}, hr)
	if setup != nil {
		setup(dyn)
	}
	var kubeObjs []runtime.Object
	if secret != nil {
		kubeObjs = append(kubeObjs, secret)
	}
	metaScheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(metaScheme)
	var metaObjs []runtime.Object
	if secret != nil {
		metaObjs = append(metaObjs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: secret.ObjectMeta})
	}
	cfg := Config{
		Namespace: "cattle-helm-system", ControllerName: "helm-locker", HelmManagers: []string{"helm"},
		Dynamic: dyn, Kube: fake.NewClientset(kubeObjs...), Metadata: metadatafake.NewSimpleMetadataClient(metaScheme, metaObjs...),
		Mapper: resettable{mapper},
	}
	if configure != nil {
		configure(&cfg)
	}
	c := New(cfg)
	// The informers run, on the fakes, so that the lock sees its objects'
	// changes as they happen (see informers.Health); their events only
	// queue keys, which these tests do not take from the queue.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.crs.RunWithContext(ctx) })
	wg.Go(func() { c.secrets.RunWithContext(ctx) })
	wg.Go(func() { _ = c.engine.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		c.queue.ShutDown()
		wg.Wait()
	})
	if !cache.WaitForCacheSync(ctx.Done(), c.crs.HasSynced, c.secrets.HasSynced) {
		t.Fatal("caches did not sync")
	}
	return c, dyn
}

// syncWatched syncs the HelmRelease hr, and once more when its status says
// the watches of its objects were not synced yet, after they are: the
// informer of a kind starts with the first lock that declares it and lists
// beside that lock's sync. The controller's queue syncs the lock again
// when they are; these tests hold the queue, so they sync it themselves.
func syncWatched(t *testing.T, c *Controller) {
	t.Helper()
	ctx := context.Background()
	key := helmReleaseKey("cattle-helm-system", "hr")
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatalf("sync %s: %v", key, err)
	}
	if locked := meta.FindStatusCondition(statusAt(t, c).Conditions, v1alpha1.ConditionLocked); locked == nil || locked.Reason != "WatchesNotSynced" {
		return
	}
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(c.engine.Unwatched()) == 0, nil
	})
	if err != nil {
		t.Fatalf("the engine's watches of %v never became current: %v", c.engine.Unwatched(), c.engine.WatchError(cmGVR))
	}
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatalf("sync %s: %v", key, err)
	}
}

// updateCR changes the HelmRelease on the fake API server, a new
// generation, and waits until the informer's cache shows it (changed says
// when). Tests change the CR there, never in the cache alone: the watch
// event of a status the last sync wrote may come after, and put the
// server's copy back.
func updateCR(t *testing.T, c *Controller, mutate func(*unstructured.Unstructured), changed func(*v1alpha1.HelmRelease) bool) {
	t.Helper()
	client := c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace("cattle-helm-system")
	u, err := client.Get(context.Background(), "hr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mutate(u)
	u.SetGeneration(u.GetGeneration() + 1)
	if _, err := client.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCR(t, c, func(hr *v1alpha1.HelmRelease) bool { return hr != nil && changed(hr) })
}

// deleteCR deletes the HelmRelease on the fake API server and waits until
// the informer's cache drops it, for the reason updateCR gives.
func deleteCR(t *testing.T, c *Controller) {
	t.Helper()
	if err := c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Delete(context.Background(), "hr", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCR(t, c, func(hr *v1alpha1.HelmRelease) bool { return hr == nil })
}

// waitForCR waits until the informer's cache holds the HelmRelease as done
// says (nil when the cache has none).
func waitForCR(t *testing.T, c *Controller, done func(*v1alpha1.HelmRelease) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		obj, ok, err := c.crs.GetIndexer().GetByKey("cattle-helm-system/hr")
		if err != nil || !ok {
			return done(nil), err
		}
		return done(obj.(*v1alpha1.HelmRelease)), nil
	})
	if err != nil {
		t.Fatalf("the informer's cache never showed the HelmRelease's change: %v", err)
	}
}

func statusOf(t *testing.T, dyn *dynamicfake.FakeDynamicClient) v1alpha1.HelmReleaseStatus {
	t.Helper()
	u, err := dyn.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Get(context.Background(), "hr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hr := &v1alpha1.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, hr); err != nil {
		t.Fatal(err)
	}
	return hr.Status
}

func TestSync(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]any
		spec        map[string]any // beside spec.release
		secret      *corev1.Secret
		wantState   v1alpha1.State
		wantReason  string
		wantMessage string // a part of the Locked condition's message
		wantObject  bool   // the ConfigMap was created from the manifest
	}{
		{name: "deployed release is locked", secret: releaseSecret(t, "deployed", 2), wantState: v1alpha1.StateDeployed, wantReason: "Locked", wantObject: true},
		{name: "pending upgrade opens the lock", secret: releaseSecret(t, "pending-upgrade", 2), wantState: v1alpha1.StateTransitioning, wantReason: "HelmOperationInProgress"},
		{name: "failed release is not re-applied", secret: releaseSecret(t, "failed", 2), wantState: v1alpha1.StateFailed, wantReason: "ReleaseFailed"},
		{name: "no release Secret", wantState: v1alpha1.StateSecretNotFound, wantReason: "SecretNotFound"},
		{name: "another controller's CR is left alone", annotations: map[string]any{v1alpha1.ManagedByAnnotation: "other"}, secret: releaseSecret(t, "deployed", 1)},
		{name: "suspended opens the lock", spec: map[string]any{"suspend": true}, secret: releaseSecret(t, "deployed", 1), wantState: v1alpha1.StateSuspended, wantReason: "Suspended"},
		{name: "Warn mode reports the missing object and does not create it", spec: map[string]any{"mode": "Warn"}, secret: releaseSecret(t, "deployed", 1), wantState: v1alpha1.StateDeployed, wantReason: "WarnMode"},
		{name: "a bad ignore rule is named", spec: map[string]any{"ignore": []any{map[string]any{"paths": []any{"/data"}, "target": map[string]any{"name": "(unclosed"}}}},
			secret: releaseSecret(t, "deployed", 1), wantState: v1alpha1.StateError, wantReason: "InvalidSpec", wantMessage: "spec.ignore[0].target.name: invalid regular expression"},
		{name: "a bad JSON pointer is named", spec: map[string]any{"ignore": []any{map[string]any{"paths": []any{"/data", "data"}}}},
			secret: releaseSecret(t, "deployed", 1), wantState: v1alpha1.StateError, wantReason: "InvalidSpec", wantMessage: "spec.ignore[0].paths[1]"},
		{name: "an ignore rule for another kind leaves the object locked", spec: map[string]any{"ignore": []any{map[string]any{"paths": []any{"/data/key"}, "target": map[string]any{"kind": "Secret"}}}},
			secret: releaseSecret(t, "deployed", 1), wantState: v1alpha1.StateDeployed, wantReason: "Locked", wantObject: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hr := helmRelease(tt.annotations)
			for k, v := range tt.spec {
				hr.Object["spec"].(map[string]any)[k] = v
			}
			c, dyn := newTestController(t, hr, tt.secret, nil)
			syncWatched(t, c)
			st := statusOf(t, dyn)
			if st.State != tt.wantState {
				t.Errorf("state = %q, want %q", st.State, tt.wantState)
			}
			if tt.wantReason != "" {
				c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionLocked)
				if c == nil || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantMessage) {
					t.Errorf("Locked condition = %+v, want reason %s and a message with %q", c, tt.wantReason, tt.wantMessage)
				}
			}
			_, err := dyn.Resource(cmGVR).Namespace("apps").Get(context.Background(), "cm", metav1.GetOptions{})
			if gotObject := err == nil; gotObject != tt.wantObject {
				t.Errorf("ConfigMap apps/cm exists = %v, want %v (a namespace-less object belongs to the release namespace)", gotObject, tt.wantObject)
			}
		})
	}
}

// TestSyncRecoversFromPanics shows one release's panic becomes that
// release's error rather than the process's crash.
func TestSyncRecoversFromPanics(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), nil, nil)
	c.cfg.Kube = nil // noSecretStatus dereferences it
	_, err := c.syncKey(context.Background(), helmReleaseKey("cattle-helm-system", "hr"))
	if err == nil || !strings.Contains(err.Error(), "panic while syncing HelmRelease cattle-helm-system/hr") {
		t.Fatalf("syncKey = %v, want the recovered panic as an error naming the key", err)
	}
}

// TestEvents drives one release through a failing and then a working
// correction, and reads the events the recorder got.
func TestEvents(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
		dyn.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			if refuse.Load() {
				return true, nil, apierrors.NewServiceUnavailable("etcd is away")
			}
			return false, nil, nil
		})
	})
	recorder := record.NewFakeRecorder(20)
	c.cfg.Recorder = recorder
	if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err == nil {
		t.Fatal("sync with a failed create: want an error")
	}
	refuse.Store(false)
	if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	close(recorder.Events)
	var got []string
	for ev := range recorder.Events {
		got = append(got, ev)
	}
	want := []string{
		"Warning DriftDetected ConfigMap apps/cm was deleted",
		"Warning DriftCorrectionFailed ConfigMap apps/cm was deleted: correcting it failed: creating:",
		"Normal Locked all 1 objects of revision 1 are held as the manifest declares",
		"Normal DriftCorrected ConfigMap apps/cm was deleted: reverted in",
	}
	if len(got) != len(want) {
		t.Fatalf("events:\n%s\nwant %d like:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

// TestForbiddenIsReportedOnce: a write the lock's identity may not make is
// reported once, names the identity and the verb, and is not retried at
// once.
func TestForbiddenIsReportedOnce(t *testing.T) {
	var creates atomic.Int32
	c, dyn := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
		dyn.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			creates.Add(1)
			return true, nil, apierrors.NewForbidden(cmGVR.GroupResource(), "cm", errors.New(`User "system:serviceaccount:apps:tenant" cannot create resource "configmaps" in API group "" in the namespace "apps"`))
		})
	})
	recorder := record.NewFakeRecorder(20)
	c.cfg.Recorder = recorder
	for range 3 {
		if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err != nil {
			t.Fatalf("sync: %v; a refusal for good is not an error to retry at once", err)
		}
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d creates in three syncs, want 1", n)
	}
	st := statusOf(t, dyn)
	cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionLocked)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "Forbidden" ||
		!strings.Contains(cond.Message, "ConfigMap apps/cm") || !strings.Contains(cond.Message, "system:serviceaccount:apps:tenant") || !strings.Contains(cond.Message, "cannot create") {
		t.Errorf("Locked condition = %+v, want Forbidden naming the object, the identity and the verb", cond)
	}
	if len(st.NotLocked) != 1 || st.NotLocked[0].Reason != "Forbidden" {
		t.Errorf("notLocked = %+v, want the ConfigMap as Forbidden", st.NotLocked)
	}
	close(recorder.Events)
	failed := 0
	for ev := range recorder.Events {
		if strings.Contains(ev, EventDriftCorrectionFailed) {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d DriftCorrectionFailed events, want 1", failed)
	}
}

// TestClaimIsNotRepeatedOnAStaleCache syncs a new CR twice before the
// cache shows the claim of the first sync: the second does not claim again.
func TestClaimIsNotRepeatedOnAStaleCache(t *testing.T) {
	hr := helmRelease(nil)
	hr.SetResourceVersion("7")
	c, dyn := newTestController(t, hr, releaseSecret(t, "deployed", 1), nil)
	for range 2 {
		_, _ = c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr"))
	}
	claims := 0
	for _, a := range dyn.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok && p.GetResource() == v1alpha1.Resource && p.GetSubresource() == "" {
			claims++
		}
	}
	if claims != 1 {
		t.Errorf("%d claim patches in two syncs over the same cached CR, want 1", claims)
	}
}

// TestSecondCRForALockedReleaseConflicts: of two CRs naming one release,
// the first holds it; the other says Conflict and writes nothing.
func TestSecondCRForALockedReleaseConflicts(t *testing.T) {
	ctx := context.Background()
	c, dyn := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	second := helmRelease(nil)
	second.SetName("hr2")
	if _, err := dyn.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok, _ := c.crs.GetIndexer().GetByKey("cattle-helm-system/hr2"); ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr2")); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Get(ctx, "hr2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hr2 v1alpha1.HelmRelease
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &hr2); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(hr2.Status.Conditions, v1alpha1.ConditionLocked)
	if cond == nil || cond.Reason != "Conflict" || !strings.Contains(cond.Message, "cattle-helm-system/hr") {
		t.Errorf("Locked of the second CR = %+v, want Conflict naming the first", cond)
	}
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "create" && a.GetResource() == cmGVR {
			t.Errorf("the second CR created %v", a)
		}
	}
	syncWatched(t, c)
	if cond := meta.FindStatusCondition(statusOf(t, dyn).Conditions, v1alpha1.ConditionLocked); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Locked of the first CR = %+v, want True", cond)
	}
}

// TestReadOnlyDeclaresAndWritesNothing: a controller for a replica
// standing by declares a Prevent lock, so it judges an edit as the leader
// would, and makes no write: no claim, status, creation or event.
func TestReadOnlyDeclaresAndWritesNothing(t *testing.T) {
	hr := helmRelease(nil)
	hr.Object["spec"].(map[string]any)["mode"] = "Prevent"
	c, dyn := newTestController(t, hr, releaseSecret(t, "deployed", 1), nil)
	c.cfg.ReadOnly = true
	c.readOnly.Store(true)
	recorder := record.NewFakeRecorder(10)
	c.cfg.Recorder = recorder
	if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	edited := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "apps"}, "data": map[string]any{"key": "edited"}}}
	j, err := c.Judge(cmGVR, nil, edited)
	if err != nil || !j.Denied() || j.Key != helmReleaseKey("cattle-helm-system", "hr").String() {
		t.Errorf("Judge of an edit on a read-only controller = %+v, %v; want it denied by the HelmRelease", j, err)
	}
	c.Record(j.Key, admission.Denial{Judgement: j, User: "alice", Operation: "UPDATE", Time: time.Now()})
	for _, a := range dyn.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			t.Errorf("a read-only controller wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	close(recorder.Events)
	for ev := range recorder.Events {
		t.Errorf("a read-only controller recorded an event: %s", ev)
	}
}

// TestPromote: a controller standing by, promoted, writes as the leader:
// its next sync of the lock it declared while read-only claims the CR,
// creates the missing object and writes the status; and the lock queue
// holds every CR, so that the sync comes at once.
func TestPromote(t *testing.T) {
	c, dyn := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	c.cfg.ReadOnly = true
	c.readOnly.Store(true)
	c.leading = make(chan struct{}) // newTestController's leads: stand by
	key := helmReleaseKey("cattle-helm-system", "hr")
	if _, err := c.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	writes := func() (n int, what []string) {
		for _, a := range dyn.Actions() {
			switch a.GetVerb() {
			case "create", "update", "patch", "delete":
				n++
				what = append(what, a.GetVerb()+" "+a.GetResource().Resource)
			}
		}
		return n, what
	}
	if n, what := writes(); n != 0 {
		t.Fatalf("read-only, the controller wrote %v", what)
	}

	c.Promote()
	c.Promote() // once is enough, twice does no harm
	leader, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	leader.Promote() // built to lead: nothing to do
	if c.ReadOnly() {
		t.Fatal("promoted, the controller is still read-only")
	}
	select {
	case <-c.leading:
	default:
		t.Fatal("promoted, the controller does not lead")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	c.lead(ctx, func(run func(context.Context)) { wg.Go(func() { run(ctx) }) })
	if got := c.queue.Len(); got != 1 {
		t.Errorf("promoted, the lock queue holds %d keys, want the one CR", got)
	}
	if _, err := c.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	_, what := writes()
	for _, want := range []string{"patch helmreleases", "create configmaps"} {
		if !slices.Contains(what, want) {
			t.Errorf("promoted, the controller's writes %v lack %s", what, want)
		}
	}
}

// TestInvalidRelease: a revision whose release names another namespace is
// InvalidRelease, and is read once, not at every sync, until its Secret
// changes; an error of the API server's is retried, not reported as an
// invalid release.
func TestInvalidRelease(t *testing.T) {
	forged := releaseSecretWith(t, "deployed", 2, func(rel map[string]any) { rel["namespace"] = "kube-system" })
	c, dyn := newTestController(t, helmRelease(nil), forged, nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	for range 3 {
		if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err != nil {
			t.Fatal(err)
		}
	}
	gets := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "secrets" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("three syncs read the invalid Secret %d times, want once", gets)
	}
	status := statusOf(t, dyn)
	if c := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionLocked); status.State != v1alpha1.StateError || c == nil || c.Reason != "InvalidRelease" ||
		!strings.Contains(c.Message, "release Secret apps/sh.helm.release.v1.rel.v2: holds revision 2 of release kube-system/rel") {
		t.Errorf("status %s, Locked %+v; want Error, InvalidRelease naming the Secret and the namespace", status.State, c)
	}
	if _, err := dyn.Resource(cmGVR).Namespace("kube-system").Get(context.Background(), "cm", metav1.GetOptions{}); err == nil {
		t.Error("the ConfigMap was created in the namespace the forged release names")
	}

	c, dyn = newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	c.cfg.Kube.(*fake.Clientset).PrependReactor("get", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err == nil || !strings.Contains(err.Error(), "etcd is down") {
		t.Errorf("sync with the Secret unreadable = %v, want the API server's error, to retry", err)
	}
	if c := meta.FindStatusCondition(statusOf(t, dyn).Conditions, v1alpha1.ConditionLocked); c != nil && c.Reason == "InvalidRelease" {
		t.Errorf("an unreadable Secret was reported as %+v", c)
	}
}

// TestInvalidLatestRevisionKeepsTheVerifiedOneHeld: a latest revision
// whose Secret is not one Helm wrote, which anyone who may write Secrets
// can plant, opens nothing: the last verified revision stays held, and
// Ready says InvalidRelease, naming the Secret.
func TestInvalidLatestRevisionKeepsTheVerifiedOneHeld(t *testing.T) {
	first := releaseSecret(t, "deployed", 1)
	first.UID = "uid-1"
	c, dyn := newTestController(t, helmRelease(nil), first, nil)
	key := helmReleaseKey("cattle-helm-system", "hr")
	syncWatched(t, c)
	if v := statusOf(t, dyn).Verified; v == nil || v.Revision != 1 {
		t.Fatalf("status.verified = %+v, want revision 1", v)
	}
	forged := releaseSecretWith(t, "deployed", 2, func(rel map[string]any) { rel["namespace"] = "kube-system" })
	forged.UID = "uid-2"
	if _, err := c.cfg.Kube.CoreV1().Secrets("apps").Create(context.Background(), forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	meta2 := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: forged.ObjectMeta}
	if _, err := c.cfg.Metadata.(*metadatafake.FakeMetadataClient).Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace("apps").(metadatafake.MetadataClient).CreateFake(meta2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return c.latestSecret(v1alpha1.ReleaseKey{Namespace: "apps", Name: "rel"}).GetName() == forged.Name
	})
	for range 2 {
		if _, err := c.sync(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	status := statusOf(t, dyn)
	locked := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionLocked)
	ready := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady)
	if locked == nil || locked.Status != metav1.ConditionTrue || status.Version != 1 {
		t.Errorf("status %s revision %d, Locked %+v; want revision 1 held", status.State, status.Version, locked)
	}
	if ready == nil || ready.Reason != v1alpha1.ReasonInvalidRelease || !strings.Contains(ready.Message, "sh.helm.release.v1.rel.v2") || !strings.Contains(ready.Message, "Revision 1, the last verified, stays held") {
		t.Errorf("Ready = %+v; want InvalidRelease naming the Secret and the revision held", ready)
	}
	if _, err := dyn.Resource(cmGVR).Namespace("kube-system").Get(context.Background(), "cm", metav1.GetOptions{}); err == nil {
		t.Error("the ConfigMap was created in the namespace the forged release names")
	}
}
