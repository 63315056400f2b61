package controller

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/admission"
	"github.com/helm-locker/helm-locker/internal/metrics"
)

// TestGoneLocksLeaveNoSeries: the series that name a lock go with it, so
// /metrics does not grow with every lock ever held: a HelmRelease moved to
// another release drops the first release's, a deleted one drops its
// release's and its own reconcile errors, and a deleted ManifestLock drops
// its denials.
func TestGoneLocksLeaveNoSeries(t *testing.T) {
	ctx := context.Background()
	m := metrics.New(nil)
	c, _ := newTestControllerWith(t, func(cfg *Config) { cfg.Metrics = m }, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	c.cfg.Recorder = record.NewFakeRecorder(100)
	key := helmReleaseKey("cattle-helm-system", "hr")
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	held := func(namespace, name string) {
		m.Drift(namespace, name, "ConfigMap", "kubectl-edit", true, 0)
		m.Fight(namespace, name, "ConfigMap")
		m.Denied(namespace, name, "ConfigMap")
	}
	naming := func(t *testing.T, label, value string) []string {
		t.Helper()
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		var found []string
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(line, "helm_locker_") && strings.Contains(line, label+`="`+value+`"`) {
				found = append(found, line)
			}
		}
		return found
	}
	held("apps", "rel")
	m.ReconcileError("cattle-helm-system", "hr")
	if got := naming(t, "release", "rel"); len(got) < 4 {
		t.Fatalf("series of release rel before: %q, want a drift, a correction, a fight and a denial", got)
	}

	updateCR(t, c, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "other", "spec", "release", "name")
	}, func(hr *v1alpha1.HelmRelease) bool { return hr.Spec.Release.Name == "other" })
	_, _ = c.sync(ctx, key) // release other has no Secret
	if got := naming(t, "release", "rel"); len(got) > 0 {
		t.Errorf("the HelmRelease now holds release other; series of rel remain:\n%s", strings.Join(got, "\n"))
	}

	held("apps", "other")
	deleteCR(t, c)
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := append(naming(t, "release", "other"), naming(t, "name", "hr")...); len(got) > 0 {
		t.Errorf("the HelmRelease is gone; its series remain:\n%s", strings.Join(got, "\n"))
	}

	m.Denied("tenant", metrics.ManifestLockRelease("lock"), "ConfigMap")
	if _, err := c.sync(ctx, manifestLockKey("tenant", "lock")); err != nil {
		t.Fatal(err)
	}
	if got := naming(t, "release", metrics.ManifestLockRelease("lock")); len(got) > 0 {
		t.Errorf("the ManifestLock is gone; its series remain:\n%s", strings.Join(got, "\n"))
	}
}

// scrapeLines returns the lines of /metrics that carry every one of want
// (each a label="value").
func scrapeLines(m *metrics.Metrics, want ...string) []string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var found []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "helm_locker_") && !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
			found = append(found, line)
		}
	}
	return found
}

// TestManifestLockSeriesAreItsOwn: a ManifestLock named as a release, in
// that release's namespace (a tenant may create and delete one there),
// counts its denials in series of its own; deleting it leaves the
// release's drifts, fights and denials be. Were they shared, a tenant
// could silence an alert on an admin's release by deleting a lock.
func TestManifestLockSeriesAreItsOwn(t *testing.T) {
	ctx := context.Background()
	m := metrics.New(nil)
	c, _ := newTestControllerWith(t, func(cfg *Config) { cfg.Metrics = m }, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	c.cfg.Recorder = record.NewFakeRecorder(100)
	if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	tenantLock := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": "rel", "namespace": "apps", "generation": int64(1)},
		"spec":     map[string]any{"manifest": ""},
	}}
	cacheManifestLock(t, c, tenantLock)
	denial := admission.Denial{Judgement: engine.Judgement{Kind: "ConfigMap"}, User: "someone", Operation: "UPDATE", Time: time.Now()}
	m.Drift("apps", "rel", "ConfigMap", "kubectl-edit", true, 0)
	m.Fight("apps", "rel", "ConfigMap")
	c.Record(declared(c, helmReleaseKey("cattle-helm-system", "hr")), denial)
	c.Record(declared(c, manifestLockKey("apps", "rel")), denial)
	release := []string{`namespace="apps"`, `release="rel"`}
	wantRelease := scrapeLines(m, release...)
	if !slices.Contains(wantRelease, `helm_locker_admission_denied_total{kind="ConfigMap",namespace="apps",release="rel"} 1`) {
		t.Errorf("the release's series, with the ManifestLock's denial counted: %q; want the release's one denial", wantRelease)
	}
	lockSeries := []string{`namespace="apps"`, `release="ManifestLock/rel"`}
	if diff := cmp.Diff([]string{`helm_locker_admission_denied_total{kind="ConfigMap",namespace="apps",release="ManifestLock/rel"} 1`}, scrapeLines(m, lockSeries...)); diff != "" {
		t.Errorf("the ManifestLock's series (-want +got):\n%s", diff)
	}

	if err := c.locks.GetIndexer().Delete(tenantLock); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, manifestLockKey("apps", "rel")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantRelease, scrapeLines(m, release...)); diff != "" {
		t.Errorf("the ManifestLock apps/rel is gone; the release's series changed (-want +got):\n%s", diff)
	}
	if got := scrapeLines(m, lockSeries...); len(got) > 0 {
		t.Errorf("the ManifestLock is gone; its series remain:\n%s", strings.Join(got, "\n"))
	}
}

// TestConflictLoserLeavesTheHoldersSeries: a HelmRelease that lost a
// Conflict holds nothing, so deleting it, or moving it to another
// release, leaves the series of the release the holder holds; deleting
// the holder drops them.
func TestConflictLoserLeavesTheHoldersSeries(t *testing.T) {
	ctx := context.Background()
	m := metrics.New(nil)
	c, dyn := newTestControllerWith(t, func(cfg *Config) { cfg.Metrics = m }, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	c.cfg.Recorder = record.NewFakeRecorder(100)
	if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	crs := dyn.Resource(v1alpha1.Resource).Namespace("cattle-helm-system")
	// cached waits until the cache shows name's HelmRelease naming
	// release, or none if release is "".
	cached := func(name, release string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			obj, ok, _ := c.crs.GetIndexer().GetByKey("cattle-helm-system/" + name)
			if !ok && release == "" {
				return
			}
			if hr, _ := obj.(*v1alpha1.HelmRelease); ok && hr != nil && hr.Spec.Release.Name == release {
				return
			}
		}
		t.Fatalf("the cache never showed HelmRelease %s naming release %q", name, release)
	}
	loser := func(name string) {
		t.Helper()
		hr := helmRelease(nil)
		hr.SetName(name)
		if _, err := crs.Create(ctx, hr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cached(name, "rel")
		if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", name)); err != nil {
			t.Fatal(err)
		}
		if st := c.state(helmReleaseKey("cattle-helm-system", name)); st.holds {
			t.Fatalf("HelmRelease %s holds release apps/rel; want it to lose the Conflict to hr", name)
		}
	}
	m.Drift("apps", "rel", "ConfigMap", "kubectl-edit", true, 0)
	m.Fight("apps", "rel", "ConfigMap")
	m.Denied("apps", "rel", "ConfigMap")
	release := []string{`namespace="apps"`, `release="rel"`}
	want := scrapeLines(m, release...)
	for _, name := range []string{"drift_detected_total", "drift_corrected_total", "fights_total", "admission_denied_total"} {
		if !slices.ContainsFunc(want, func(line string) bool { return strings.HasPrefix(line, "helm_locker_"+name+"{") }) {
			t.Fatalf("series of release rel: %q, want one of %s", want, name)
		}
	}

	loser("hr2")
	if err := crs.Delete(ctx, "hr2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cached("hr2", "")
	if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr2")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, scrapeLines(m, release...)); diff != "" {
		t.Errorf("HelmRelease hr2, which lost the Conflict, is deleted; the holder's series changed (-want +got):\n%s", diff)
	}

	loser("hr3")
	moved, err := crs.Get(ctx, "hr3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(moved.Object, "other", "spec", "release", "name")
	if _, err := crs.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached("hr3", "other")
	_, _ = c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr3")) // release other has no Secret
	if diff := cmp.Diff(want, scrapeLines(m, release...)); diff != "" {
		t.Errorf("HelmRelease hr3, which lost the Conflict, names another release; the holder's series changed (-want +got):\n%s", diff)
	}

	if err := crs.Delete(ctx, "hr", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cached("hr", "")
	if _, err := c.sync(ctx, helmReleaseKey("cattle-helm-system", "hr")); err != nil {
		t.Fatal(err)
	}
	if got := scrapeLines(m, release...); len(got) > 0 {
		t.Errorf("the holder hr is gone; the series of its release remain:\n%s", strings.Join(got, "\n"))
	}
}
