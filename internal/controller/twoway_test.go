package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/twoway"
)

// TestUnsettledCount: each HelmRelease's lock counts as unsettled from its
// first sync until it settles or is forgotten, once.
func TestUnsettledCount(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), nil, nil)
	a, b := helmReleaseKey("r", "a"), helmReleaseKey("r", "b")
	c.state(a)
	c.state(a)
	st := c.state(b)
	if n := c.unsettled.Load(); n != 2 {
		t.Fatalf("unsettled = %d with two locks syncing, want 2", n)
	}
	st.settled = true
	c.unsettled.Add(-1)
	c.dropState(b)
	c.dropState(a)
	c.dropState(a)
	if n := c.unsettled.Load(); n != 0 {
		t.Errorf("unsettled = %d once both are forgotten, want 0", n)
	}
}

// TestFailedUpgradeSurvivesRestart: an upgrade that Helm failed is
// written into status.failedUpgrade, with the revision it left failed as
// the latest, if any; a controller started anew on that status (a
// restart, or a new leader) still holds the verified revision past that
// failed one, and does not try the same render again.
func TestFailedUpgradeSurvivesRestart(t *testing.T) {
	tests := []struct {
		name string
		// left is the revision Helm leaves failed as the latest, if
		// any: the upgrade's, its rollback failing too (Helm 4).
		left *corev1.Secret
	}{
		{"a failed revision left as the latest", chartSecret(t, "failed", 2)},
		{"no revision left", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := chartSecret(t, "deployed", 1)
			hr := upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer"})
			key := helmReleaseKey("cattle-helm-system", "hr")

			// The first controller locks revision 1, then its
			// upgrade fails.
			up := &upgrades{fail: errors.New(`configmaps "cm" is forbidden`)}
			c, _, _ := twoWayController(t, hr, &renders{results: []renderAnswer{staleRender("changed")}}, up, first)
			syncWatched(t, c)
			secrets := []*corev1.Secret{first}
			if tt.left != nil {
				secrets = append(secrets, tt.left)
				up.before = func() { addSecret(t, c, tt.left) }
			}
			if _, err := c.twoway.Render(context.Background(), key.ObjectName); err != nil {
				t.Fatal(err)
			}
			if up.calls != 1 {
				t.Fatalf("%d upgrades, want 1", up.calls)
			}
			want := &v1alpha1.FailedUpgrade{Release: v1alpha1.ReleaseKey{Namespace: "apps", Name: "rel"}, Error: `configmaps "cm" is forbidden`,
				Cause: "revision 1 renders differently now than when Helm rendered it"}
			if tt.left != nil {
				want.Revision, want.SecretUID = 2, string(tt.left.UID)
				waitFor(t, func() bool { return c.latestSecret(want.Release).GetName() == tt.left.Name })
			}
			if _, err := c.sync(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			got := statusAt(t, c).FailedUpgrade
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(v1alpha1.FailedUpgrade{}, "RenderDigest", "Time")); diff != "" || got.RenderDigest == "" {
				t.Fatalf("status.failedUpgrade (-want +got), and the render's digest %q:\n%s", got.RenderDigest, diff)
			}

			// A controller started on that status, as after a
			// restart.
			u, err := c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Get(context.Background(), "hr", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			u.SetResourceVersion("")
			up2 := &upgrades{}
			c2, _, _ := twoWayController(t, u, &renders{results: []renderAnswer{staleRender("changed")}}, up2, first, secrets[1:]...)
			c2.declareAll(context.Background())
			syncWatched(t, c2)
			status := statusAt(t, c2)
			locked := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionLocked)
			if status.Version != 1 || locked == nil || locked.Status != metav1.ConditionTrue {
				t.Errorf("after a restart: %s revision %d, Locked %+v; want revision 1 held", status.State, status.Version, locked)
			}
			if ready := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); tt.left != nil && (ready == nil || ready.Reason != v1alpha1.ReasonUpgradeFailed) {
				t.Errorf("after a restart, Ready = %+v, want UpgradeFailed: revision 1 held past revision 2", ready)
			}
			if diff := cmp.Diff(got, status.FailedUpgrade); diff != "" {
				t.Errorf("status.failedUpgrade after a restart (-want +got):\n%s", diff)
			}
			if _, err := c2.twoway.Render(context.Background(), key.ObjectName); err != nil {
				t.Fatal(err)
			}
			if _, err := c2.sync(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			rendered := meta.FindStatusCondition(statusAt(t, c2).Conditions, v1alpha1.ConditionRendered)
			if up2.calls != 0 || rendered == nil || rendered.Reason != v1alpha1.ReasonUpgradeFailed || !strings.Contains(rendered.Message, "forbidden") {
				t.Errorf("after a restart, %d upgrades and Rendered %+v; want the failed render reported with Helm's error, not tried again", up2.calls, rendered)
			}
		})
	}
}

// addSecret stores secret in the cluster of c's fakes, as Helm writes a
// revision.
func addSecret(t *testing.T, c *Controller, secret *corev1.Secret) {
	t.Helper()
	if _, err := c.cfg.Kube.CoreV1().Secrets("apps").Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: secret.ObjectMeta}
	if _, err := c.cfg.Metadata.(*metadatafake.FakeMetadataClient).Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace("apps").(metadatafake.MetadataClient).CreateFake(m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// statusAt is the status of c's HelmRelease hr as its client has it.
func statusAt(t *testing.T, c *Controller) v1alpha1.HelmReleaseStatus {
	t.Helper()
	u, err := c.cfg.Dynamic.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Get(context.Background(), "hr", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hr v1alpha1.HelmRelease
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &hr); err != nil {
		t.Fatal(err)
	}
	return hr.Status
}

// renders is a Renderer that answers each render with the next of its
// results.
type renders struct {
	results []renderAnswer
	calls   int
}

type renderAnswer struct {
	out *render.Output
	err error
}

func (r *renders) Render(context.Context, *render.Release, render.Cluster) (*render.Output, error) {
	a := r.results[min(r.calls, len(r.results)-1)]
	r.calls++
	return a.out, a.err
}

// upgrades is an upgrader that counts its calls, and answers each with
// fail, after calling before if it is set.
type upgrades struct {
	calls  int
	fail   error
	before func()
}

func (u *upgrades) Upgrade(context.Context, *rest.Config, *render.Release) (int, error) {
	u.calls++
	if u.before != nil {
		u.before()
	}
	if u.fail != nil {
		return 0, u.fail
	}
	return 1 + u.calls, nil
}

// staleRender is a render of the test chart that differs from what its
// revision stores, as a lookup that changed to value makes it.
func staleRender(value string) renderAnswer {
	return renderAnswer{out: &render.Output{Manifest: "---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: " + value + "\n"}}
}

// chartSecret is revision version of release apps/rel, with status, as
// Helm writes it, with a chart to render.
func chartSecret(t *testing.T, status string, version int) *corev1.Secret {
	t.Helper()
	chart := map[string]any{"metadata": map[string]any{"name": "c", "version": "1.0.0", "apiVersion": "v2"}}
	return releaseSecretWith(t, status, version, func(rel map[string]any) { rel["chart"] = chart })
}

// upgradeModeCR is the HelmRelease hr of release apps/rel with spec
// fields set beside spec.release.
func upgradeModeCR(name string, spec map[string]any) *unstructured.Unstructured {
	hr := helmRelease(nil)
	hr.SetName(name)
	for k, v := range spec {
		hr.Object["spec"].(map[string]any)[k] = v
	}
	return hr
}

// twoWayController is a controller on fakes whose renders answer with
// renderer and whose upgrades up counts, with its clock stopped at start.
// extra Secrets are stored beside secret.
func twoWayController(t *testing.T, hr *unstructured.Unstructured, renderer Renderer, up *upgrades, secret *corev1.Secret, extra ...*corev1.Secret) (*Controller, *clocktesting.FakePassiveClock, *record.FakeRecorder) {
	t.Helper()
	events := record.NewFakeRecorder(100)
	c, dyn := newTestControllerWith(t, func(cfg *Config) {
		cfg.Renderer = renderer
		cfg.Recorder = events
		if len(extra) > 0 {
			cfg.Kube, cfg.Metadata = secretFakes(append([]*corev1.Secret{secret}, extra...)...)
		}
	}, hr, secret, nil)
	// Lookups and writes impersonate the writer: here, through the fake.
	c.cfg.REST = &rest.Config{Host: "https://127.0.0.1:1"}
	c.writersMu.Lock()
	c.writers[impersonated("apps", "writer")] = dyn
	c.writersMu.Unlock()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	cfg := c.twoWayConfig()
	cfg.Clock, cfg.Upgrader = clk, up
	c.twoway.ShutDown()
	c.twoway = twoway.New(cfg, c.engine, twoWayLocks{c})
	t.Cleanup(c.twoway.ShutDown)
	return c, clk, events
}

// secretFakes are the clients of a cluster that stores secrets.
func secretFakes(secrets ...*corev1.Secret) (*fake.Clientset, *metadatafake.FakeMetadataClient) {
	var objs, metas []runtime.Object
	for _, s := range secrets {
		objs = append(objs, s)
		metas = append(metas, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: s.ObjectMeta})
	}
	scheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(scheme)
	return fake.NewClientset(objs...), metadatafake.NewSimpleMetadataClient(scheme, metas...)
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
