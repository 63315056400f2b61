package controller

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"

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
	const key = "cattle-helm-system/hr"
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

	moved := helmRelease(nil)
	_ = unstructured.SetNestedField(moved.Object, "other", "spec", "release", "name")
	if err := c.crs.GetIndexer().Update(moved); err != nil {
		t.Fatal(err)
	}
	_, _ = c.sync(ctx, key) // release other has no Secret
	if got := naming(t, "release", "rel"); len(got) > 0 {
		t.Errorf("the HelmRelease now holds release other; series of rel remain:\n%s", strings.Join(got, "\n"))
	}

	held("apps", "other")
	if err := c.crs.GetIndexer().Delete(moved); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := append(naming(t, "release", "other"), naming(t, "name", "hr")...); len(got) > 0 {
		t.Errorf("the HelmRelease is gone; its series remain:\n%s", strings.Join(got, "\n"))
	}

	m.Denied("tenant", "lock", "ConfigMap")
	if _, err := c.sync(ctx, manifestLockPrefix+"tenant/lock"); err != nil {
		t.Fatal(err)
	}
	if got := naming(t, "release", "lock"); len(got) > 0 {
		t.Errorf("the ManifestLock is gone; its series remain:\n%s", strings.Join(got, "\n"))
	}
}
