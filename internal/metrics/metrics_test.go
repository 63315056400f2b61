package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// scrape is what /metrics serves now.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// series counts the series of metric name in a scrape.
func series(body, name string) int {
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{") {
			n++
		}
	}
	return n
}

// TestDriftManagerIsBounded: a writer chooses its own field manager, so
// drift_detected_total names only known ones (Helm's, kubectl's,
// Kubernetes', the locker's and those KnowManagers adds) and counts every
// other as "other": a thousand made-up managers add one series, not a
// thousand.
func TestDriftManagerIsBounded(t *testing.T) {
	m := New(nil)
	m.KnowManagers("my-helm")
	for _, manager := range []string{"helm", "kubectl-patch", "kube-controller-manager", "my-helm", ""} {
		m.Drift("apps", "web", "ConfigMap", manager, false, 0)
	}
	for i := range 1000 {
		m.Drift("apps", "web", "ConfigMap", fmt.Sprintf("tenant-%d", i), false, 0)
	}
	m.Drift("apps", "web", "ConfigMap", "kubectl-made-up", false, 0)
	body := scrape(t, m)
	for _, want := range []string{
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="helm",namespace="apps",release="web"} 1`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="kubectl-patch",namespace="apps",release="web"} 1`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="kube-controller-manager",namespace="apps",release="web"} 1`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="my-helm",namespace="apps",release="web"} 1`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="unknown",namespace="apps",release="web"} 1`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="other",namespace="apps",release="web"} 1001`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := series(body, "helm_locker_drift_detected_total"); n != 6 {
		t.Errorf("%d drift_detected_total series, want 6", n)
	}
}

// TestForgetDeletesSeries: once a lock is gone, no series names it: its
// drifts, corrections, fights, denials and reconcile errors; another
// lock's stay.
func TestForgetDeletesSeries(t *testing.T) {
	m := New(nil)
	for _, release := range []string{"web", "shop"} {
		m.ObserveRelease("registration/"+release, true, 3)
		m.Drift("apps", release, "ConfigMap", "kubectl-edit", true, 0)
		m.Drift("apps", release, "Service", "", false, 0)
		m.Fight("apps", release, "ConfigMap")
		m.Denied("apps", release, "ConfigMap")
		m.ReconcileError("registration", release)
	}
	m.ForgetRelease("registration/web")
	m.ForgetLock("apps", "web")
	body := scrape(t, m)
	for _, name := range []string{"drift_detected_total", "drift_corrected_total", "fights_total", "admission_denied_total", "reconcile_errors_total"} {
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "helm_locker_"+name+"{") && (strings.Contains(line, `release="web"`) || strings.Contains(line, `name="web"`)) {
				t.Errorf("a series of the forgotten lock remains: %s", line)
			}
		}
		if series(body, "helm_locker_"+name) == 0 {
			t.Errorf("no %s series of release shop remains", name)
		}
	}
	for _, want := range []string{"helm_locker_locked_releases 1", "helm_locker_locked_objects 3"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var none *Metrics
	none.ForgetLock("apps", "web")
	none.KnowManagers("helm")
}

// TestManifestLockSeriesAreApart: a ManifestLock may bear a release's name
// in that release's namespace; its denials are counted apart, and
// forgetting it leaves every series of the release.
func TestManifestLockSeriesAreApart(t *testing.T) {
	m := New(nil)
	m.Drift("apps", "web", "ConfigMap", "kubectl-edit", true, 0)
	m.Fight("apps", "web", "ConfigMap")
	m.Denied("apps", "web", "ConfigMap")
	m.Denied("apps", ManifestLockRelease("web"), "ConfigMap")
	m.ForgetManifestLock("apps", "web")
	body := scrape(t, m)
	for _, want := range []string{
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="kubectl-edit",namespace="apps",release="web"} 1`,
		`helm_locker_drift_corrected_total{kind="ConfigMap",namespace="apps",release="web"} 1`,
		`helm_locker_fights_total{kind="ConfigMap",namespace="apps",release="web"} 1`,
		`helm_locker_admission_denied_total{kind="ConfigMap",namespace="apps",release="web"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the ManifestLock apps/web is forgotten; the release's series lack %s", want)
		}
	}
	if strings.Contains(body, `release="ManifestLock/web"`) {
		t.Errorf("the ManifestLock apps/web is forgotten; its denials remain")
	}
	var none *Metrics
	none.ForgetManifestLock("apps", "web")
}

// BenchmarkHeldSeries is the live heap a HelmRelease's series take while
// its release is held, for 2,000 of them holding 5 kinds each, as at
// 100,000 locked objects in the bench's releases of 50: the 20 counters
// each kept at 0 (see HoldRelease) and the HelmRelease's own 3
// (ObserveRelease). On b28e62b, each of the 20 was a map entry of 101
// bytes and the 3 were a GaugeVec's or CounterVec's: 3,533 bytes a
// release; 719 as kept now.
func BenchmarkHeldSeries(b *testing.B) {
	const releases = 2000
	kinds := []string{"ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"}
	var perRelease float64
	for b.Loop() {
		before := liveHeap()
		m := New(nil)
		for i := range releases {
			m.ObserveRelease(fmt.Sprintf("registration/hr-%d", i), true, 50)
			m.HoldRelease(fmt.Sprintf("ns-%d", i/10), fmt.Sprintf("release-%d", i), kinds)
		}
		perRelease = float64(liveHeap()-before) / releases
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perRelease, "live-B/release")
}

// BenchmarkScrape is what one scrape of /metrics costs the locker at
// 2,000 held releases of 5 kinds, as at 100,000 locked objects in the
// bench's releases of 50: the 40,000 series kept at 0 and the rest.
func BenchmarkScrape(b *testing.B) {
	const releases = 2000
	kinds := []string{"ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"}
	m := New(nil)
	for i := range releases {
		m.HoldRelease(fmt.Sprintf("ns-%d", i/10), fmt.Sprintf("release-%d", i), kinds)
	}
	h := m.Handler()
	var size int
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("scrape: %d", w.Code)
		}
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes")
}

// liveHeap is the heap's live bytes after a garbage collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestReleaseSeriesKeepTheirLabels: the release counters' samples share
// label pairs within a scrape (see releaseCounters.Collect); every series
// must still carry its own release, kind and manager, and a kind that is
// not UTF-8 must not fail the scrape.
func TestReleaseSeriesKeepTheirLabels(t *testing.T) {
	m := New(nil)
	m.HoldRelease("ns-a", "web", []string{"ConfigMap", "Secret"})
	m.HoldRelease("ns-b", "web", []string{"ConfigMap"})
	m.HoldRelease("ns-b", "db", []string{"Odd\xff"})
	m.Drift("ns-a", "web", "Secret", "helm", false, 0)
	m.Drift("ns-b", "web", "ConfigMap", "kubectl-edit", true, 0)
	m.Drift("ns-b", "web", "ConfigMap", "kubectl-edit", true, 0)
	body := scrape(t, m)
	var got []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "helm_locker_drift_") {
			got = append(got, line)
		}
	}
	want := []string{
		`helm_locker_drift_corrected_total{kind="ConfigMap",namespace="ns-a",release="web"} 0`,
		`helm_locker_drift_corrected_total{kind="ConfigMap",namespace="ns-b",release="web"} 2`,
		`helm_locker_drift_corrected_total{kind="Odd` + "\uFFFD" + `",namespace="ns-b",release="db"} 0`,
		`helm_locker_drift_corrected_total{kind="Secret",namespace="ns-a",release="web"} 0`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="kubectl-edit",namespace="ns-b",release="web"} 2`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="unknown",namespace="ns-a",release="web"} 0`,
		`helm_locker_drift_detected_total{kind="ConfigMap",manager="unknown",namespace="ns-b",release="web"} 0`,
		`helm_locker_drift_detected_total{kind="Odd` + "\uFFFD" + `",manager="unknown",namespace="ns-b",release="db"} 0`,
		`helm_locker_drift_detected_total{kind="Secret",manager="helm",namespace="ns-a",release="web"} 1`,
		`helm_locker_drift_detected_total{kind="Secret",manager="unknown",namespace="ns-a",release="web"} 0`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("release series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
