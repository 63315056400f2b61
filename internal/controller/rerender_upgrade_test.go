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
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/internal/throttle"
)

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
	c.clock = clk
	c.upgrades = throttle.New[v1alpha1.ReleaseKey](throttle.Options{Interval: c.cfg.RerenderUpgradeInterval, MaxPerHour: c.cfg.RerenderUpgradeMaxPerHour}, clk)
	c.upgrader = up
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

// queueRender sets what a sync of the lock would have queued: a render
// of revision 1, as writer, in mode.
func queueRender(t *testing.T, c *Controller, secret *corev1.Secret, key lockKey, writer string, mode v1alpha1.Rerender) *renderState {
	t.Helper()
	stored, err := storage.Read(secret, "apps", "rel")
	if err != nil {
		t.Fatal(err)
	}
	rs := &renderState{target: renderTarget{release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, revision: 1,
		digest: manifestDigest(manifestYAML), chartDigest: stored.ChartDigest(), writer: writer, mode: mode}}
	c.renderStates.Set(key, rs)
	return rs
}

// TestUpgradeRereadsTheCR: a render queued in Upgrade mode as writer
// upgrades only if the CR, as the cache shows it when the render is done,
// still says Upgrade with that writer; otherwise it reports as Report mode
// does.
func TestUpgradeRereadsTheCR(t *testing.T) {
	tests := []struct {
		name    string
		cr      *unstructured.Unstructured
		upgrade bool
	}{
		{"still Upgrade as writer", upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer"}), true},
		{"switched to Report", upgradeModeCR("hr", map[string]any{"rerender": "Report", "serviceAccountName": "writer"}), false},
		{"switched to Off", upgradeModeCR("hr", map[string]any{"rerender": "Off", "serviceAccountName": "writer"}), false},
		{"rerender unset, --default-rerender Off", upgradeModeCR("hr", map[string]any{"serviceAccountName": "writer"}), false},
		{"another writer", upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "deployer"}), false},
		{"suspended", upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer", "suspend": true}), false},
		{"deleted", upgradeModeCR("another", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer"}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := chartSecret(t, "deployed", 1)
			up := &upgrades{}
			c, _, _ := twoWayController(t, tt.cr, &renders{results: []renderAnswer{staleRender("changed")}}, up, secret)
			key := helmReleaseKey("cattle-helm-system", "hr")
			rs := queueRender(t, c, secret, key, "writer", v1alpha1.RerenderUpgrade)
			if _, err := c.renderKey(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			if got := up.calls == 1; got != tt.upgrade {
				t.Fatalf("%d upgrades, want upgraded %v", up.calls, tt.upgrade)
			}
			got := rs.result.cond
			switch {
			case tt.upgrade && got.Reason != v1alpha1.ReasonUpgraded:
				t.Errorf("Rendered = %s: %q, want Upgraded", got.Reason, got.Message)
			case !tt.upgrade && (got.Reason != v1alpha1.ReasonClusterChanged || !strings.Contains(got.Message, "ConfigMap cm at /data/key would change")):
				t.Errorf("Rendered = %s: %q, want ClusterChanged naming what would change, as in Report mode", got.Reason, got.Message)
			}
		})
	}
}

// TestUpgradeThrottled: the first stale render upgrades at once; one of
// another render within --rerender-upgrade-interval is held back, says
// so with the time of its next try and what would change, records one
// event, and is queued again for that time, when it upgrades with no
// other change. The interval doubles for the next, as the cause kept
// changing.
func TestUpgradeThrottled(t *testing.T) {
	secret := chartSecret(t, "deployed", 1)
	up := &upgrades{}
	r := &renders{results: []renderAnswer{staleRender("first"), staleRender("first")}}
	c, clk, events := twoWayController(t, upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer"}), r, up, secret)
	key := helmReleaseKey("cattle-helm-system", "hr")
	rs := queueRender(t, c, secret, key, "writer", v1alpha1.RerenderUpgrade)
	start := clk.Now()
	render := func(after time.Duration, answer renderAnswer) time.Duration {
		t.Helper()
		clk.SetTime(start.Add(after))
		r.results, r.calls = []renderAnswer{answer}, 0
		again, err := c.renderKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return again
	}
	type step struct {
		upgrades int
		reason   string
		again    time.Duration
	}
	var got []step
	note := func(again time.Duration) { got = append(got, step{up.calls, rs.result.cond.Reason, again}) }

	note(render(0, staleRender("first")))
	note(render(10*time.Second, staleRender("second")))
	held := rs.result.cond.Message
	note(render(20*time.Second, staleRender("third")))
	note(render(time.Minute, staleRender("third")))
	note(render(90*time.Second, staleRender("fourth")))
	want := []step{
		{1, v1alpha1.ReasonUpgraded, 0},
		{1, v1alpha1.ReasonUpgradeThrottled, 50 * time.Second},
		{1, v1alpha1.ReasonUpgradeThrottled, 40 * time.Second},
		{2, v1alpha1.ReasonUpgraded, 0},
		// Within twice the interval: it doubled, to 2m after 1m.
		{2, v1alpha1.ReasonUpgradeThrottled, 90 * time.Second},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(step{})); diff != "" {
		t.Errorf("upgrades, Rendered and requeue at each render (-want +got):\n%s", diff)
	}
	for _, s := range []string{"ConfigMap cm at /data/key would change", "held back until 2026-01-01T12:01:00Z", "upgraded at 2026-01-01T12:00:00Z", "once every 1m0s"} {
		if !strings.Contains(held, s) {
			t.Errorf("held-back message %q lacks %q", held, s)
		}
	}
	var throttled []string
	for len(events.Events) > 0 {
		if e := <-events.Events; strings.Contains(e, v1alpha1.ReasonUpgradeThrottled) {
			throttled = append(throttled, e)
		}
	}
	if len(throttled) != 2 {
		t.Errorf("%d UpgradeThrottled events, want one per hold (2): %q", len(throttled), throttled)
	}
}

// TestUpgradeCappedPerHour: past --rerender-upgrade-max-per-hour upgrades
// within the hour, the next waits until the first is an hour old.
func TestUpgradeCappedPerHour(t *testing.T) {
	secret := chartSecret(t, "deployed", 1)
	up := &upgrades{}
	r := &renders{}
	hr := upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer"})
	c, clk, _ := twoWayController(t, hr, r, up, secret)
	c.cfg.RerenderUpgradeMaxPerHour = 2
	c.upgrades = throttle.New[v1alpha1.ReleaseKey](throttle.Options{Interval: time.Minute, MaxPerHour: 2}, clk)
	key := helmReleaseKey("cattle-helm-system", "hr")
	rs := queueRender(t, c, secret, key, "writer", v1alpha1.RerenderUpgrade)
	start := clk.Now()
	var again time.Duration
	for i, at := range []time.Duration{0, 10 * time.Minute, 30 * time.Minute} {
		clk.SetTime(start.Add(at))
		r.results, r.calls = []renderAnswer{staleRender(string(rune('a' + i)))}, 0
		var err error
		if again, err = c.renderKey(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	if up.calls != 2 || again != 30*time.Minute {
		t.Errorf("%d upgrades, the third queued again in %s; want 2, and 30m", up.calls, again)
	}
	if msg := rs.result.cond.Message; !strings.Contains(msg, "upgraded 2 times within the hour (--rerender-upgrade-max-per-hour)") || !strings.Contains(msg, "until 2026-01-01T13:00:00Z") {
		t.Errorf("Rendered message %q does not name the cap and the time", msg)
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
			if _, err := c.sync(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			secrets := []*corev1.Secret{first}
			if tt.left != nil {
				secrets = append(secrets, tt.left)
				up.before = func() { addSecret(t, c, tt.left) }
			}
			if _, err := c.renderKey(context.Background(), key); err != nil {
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
			if _, err := c2.sync(context.Background(), key); err != nil {
				t.Fatal(err)
			}
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
			if _, err := c2.renderKey(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			rs, _ := c2.renderStates.Get(key)
			if up2.calls != 0 || rs.result == nil || rs.result.cond.Reason != v1alpha1.ReasonUpgradeFailed || !strings.Contains(rs.result.cond.Message, "forbidden") {
				t.Errorf("after a restart, %d upgrades and Rendered %+v; want the failed render reported with Helm's error, not tried again", up2.calls, rs.result)
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

// TestFailedUpgradeKeptUntilOneSucceeds: while another upgrade is tried,
// the lock still holds past the revision the last failure left; a try
// that fails without Helm writing anything keeps that revision in the new
// record; one that succeeds forgets the failure, and the status with it.
func TestFailedUpgradeKeptUntilOneSucceeds(t *testing.T) {
	first, failed := chartSecret(t, "deployed", 1), chartSecret(t, "failed", 2)
	rk := v1alpha1.ReleaseKey{Namespace: "apps", Name: "rel"}
	up := &upgrades{fail: errors.New("the release changed")}
	r := &renders{results: []renderAnswer{staleRender("second")}}
	c, clk, _ := twoWayController(t, upgradeModeCR("hr", map[string]any{"rerender": "Upgrade", "serviceAccountName": "writer"}), r, up, first, failed)
	c.failedUpgrades.Set(rk, v1alpha1.FailedUpgrade{Release: rk, RenderDigest: "the first render", Revision: 2, SecretUID: string(failed.UID)})
	key := helmReleaseKey("cattle-helm-system", "hr")
	queueRender(t, c, first, key, "writer", v1alpha1.RerenderUpgrade)
	heldPast := 0
	up.before = func() {
		if c.failedByUpgrade(rk, 2, failed.UID) {
			heldPast++
		}
	}
	if _, err := c.renderKey(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	f, ok := c.failedUpgrades.Get(rk)
	if up.calls != 1 || heldPast != 1 || !ok || f.Revision != 2 || f.RenderDigest == "the first render" || f.Error != "the release changed" {
		t.Errorf("%d upgrades, held past revision 2 during %d; then %+v: want revision 2 still held past, for the new render", up.calls, heldPast, f)
	}

	up.fail = nil
	r.results, r.calls = []renderAnswer{staleRender("third")}, 0
	clk.SetTime(clk.Now().Add(time.Hour))
	if _, err := c.renderKey(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if f, ok := c.failedUpgrades.Get(rk); up.calls != 2 || ok {
		t.Errorf("%d upgrades, then the failure %+v still remembered; want it forgotten once an upgrade succeeds", up.calls, f)
	}
}
