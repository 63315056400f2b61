package twoway

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/storage"
)

type resettable struct{ meta.RESTMapper }

func (resettable) Reset() {}

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

const manifestYAML = "---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: declared\n"

// hrKey is the key of the HelmRelease the tests' locks are.
var hrKey = cache.NewObjectName("cattle-helm-system", "hr")

// releaseSecretWith is revision version of release apps/rel, with
// status, as Helm writes it, its release changed by edit.
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

// locks is the controller as two-way locking sees it: its CRs, its
// writer, the release Secrets of kube, and the syncs asked of it.
type locks struct {
	mu             sync.Mutex
	crs            map[cache.ObjectName]*v1alpha1.HelmRelease
	writer         dynamic.Interface
	kube           *fake.Clientset
	defaultAccount string
	resynced       int
}

var _ Locks = (*locks)(nil)

func (l *locks) HelmRelease(key cache.ObjectName) (*v1alpha1.HelmRelease, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hr, ok := l.crs[key]
	return hr, ok
}

func (l *locks) ServiceAccount(hr *v1alpha1.HelmRelease) string {
	if hr.Spec.ServiceAccountName != "" {
		return hr.Spec.ServiceAccountName
	}
	return l.defaultAccount
}

func (l *locks) Writer(string, string) (dynamic.Interface, error) { return l.writer, nil }

func (l *locks) LatestRevision(ctx context.Context, rk v1alpha1.ReleaseKey) (Revision, error) {
	list, err := l.kube.CoreV1().Secrets(rk.Namespace).List(ctx, metav1.ListOptions{LabelSelector: storage.Selector(rk.Name)})
	if err != nil {
		return Revision{}, err
	}
	var latest Revision
	for i := range list.Items {
		s := &list.Items[i]
		if v, ok := storage.Revision(s); ok && v > latest.Number {
			latest = Revision{Number: v, Status: s.Labels[storage.LabelStatus], UID: s.UID}
		}
	}
	return latest, nil
}

func (l *locks) Settled() bool { return true }

func (l *locks) Resync(cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resynced++
}

// fixture is two-way locking on fakes: dyn serves the lookups and the
// engine's watches, kube the release Secrets and discovery.
type fixture struct {
	dyn    *dynamicfake.FakeDynamicClient
	kube   *fake.Clientset
	locks  *locks
	events *record.FakeRecorder
	clock  *clocktesting.FakePassiveClock
}

// newRenders is two-way locking on fakes holding secrets, with the CR
// hr if set, configured by configure, its clock stopped. setup, if set,
// prepares the dynamic client before the engine uses it.
func newRenders(t *testing.T, hr *v1alpha1.HelmRelease, configure func(*Config), setup func(*dynamicfake.FakeDynamicClient), secrets ...*corev1.Secret) (*Renders, *fixture) {
	t.Helper()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme.Scheme, map[schema.GroupVersionResource]string{
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}: "CustomResourceDefinitionList",
	})
	if setup != nil {
		setup(dyn)
	}
	var objs []runtime.Object
	for _, s := range secrets {
		objs = append(objs, s)
	}
	f := &fixture{
		dyn: dyn, kube: fake.NewClientset(objs...), events: record.NewFakeRecorder(100),
		clock: clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)),
	}
	f.locks = &locks{crs: map[cache.ObjectName]*v1alpha1.HelmRelease{}, writer: dyn, kube: f.kube}
	if hr != nil {
		f.locks.crs[cache.MetaObjectToName(hr)] = hr
	}
	e := engine.New(dyn, resettable{mapper}, func(string) {}, engine.Options{})
	cfg := Config{
		ControllerName: "helm-locker", Kube: f.kube, Mapper: resettable{mapper}, Recorder: f.events,
		REST: &rest.Config{Host: "https://127.0.0.1:1"}, Clock: f.clock,
	}
	if configure != nil {
		configure(&cfg)
	}
	r := New(cfg, e, f.locks)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		r.ShutDown()
		wg.Wait()
	})
	// Types watched from here on start at once, as in a running
	// controller.
	if !e.WaitForSynced(ctx) {
		t.Fatal("the engine did not start")
	}
	return r, f
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
