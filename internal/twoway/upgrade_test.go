package twoway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
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

// upgradeModeCR is the HelmRelease name of release apps/rel, as edit
// changes its spec.
func upgradeModeCR(name string, edit func(*v1alpha1.HelmReleaseSpec)) *v1alpha1.HelmRelease {
	hr := &v1alpha1.HelmRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "cattle-helm-system", Generation: 1},
		Spec: v1alpha1.HelmReleaseSpec{Release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}}}
	edit(&hr.Spec)
	return hr
}

// upgradeAs is spec.rerender mode as ServiceAccount writer.
func upgradeAs(mode v1alpha1.Rerender, writer string) func(*v1alpha1.HelmReleaseSpec) {
	return func(s *v1alpha1.HelmReleaseSpec) { s.Rerender, s.ServiceAccountName = mode, writer }
}

// twoWayController is two-way locking on fakes whose renders answer
// with renderer and whose upgrades up counts, with its clock stopped at
// start. extra Secrets are stored beside secret.
func twoWayController(t *testing.T, hr *v1alpha1.HelmRelease, renderer Renderer, up *upgrades, secret *corev1.Secret, extra ...*corev1.Secret) (*Renders, *clocktesting.FakePassiveClock, *record.FakeRecorder) {
	t.Helper()
	r, f := newRenders(t, hr, func(cfg *Config) {
		cfg.Renderer = renderer
		cfg.Upgrader = up
	}, nil, append([]*corev1.Secret{secret}, extra...)...)
	return r, f.clock, f.events
}

// queueRender sets what a sync of the lock would have queued: a render
// of revision 1, as writer, in mode.
func queueRender(t *testing.T, r *Renders, secret *corev1.Secret, key cache.ObjectName, writer string, mode v1alpha1.Rerender) *renderState {
	t.Helper()
	stored, err := storage.Read(secret, "apps", "rel")
	if err != nil {
		t.Fatal(err)
	}
	rs := &renderState{target: renderTarget{release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, revision: 1,
		digest: storage.Digest(manifestYAML), chartDigest: stored.ChartDigest(), writer: writer, mode: mode}}
	r.states.Set(key, rs)
	return rs
}

// TestUpgradeRereadsTheCR: a render queued in Upgrade mode as writer
// upgrades only if the CR, as the cache shows it when the render is done,
// still says Upgrade with that writer; otherwise it reports as Report mode
// does.
func TestUpgradeRereadsTheCR(t *testing.T) {
	tests := []struct {
		name    string
		cr      *v1alpha1.HelmRelease
		upgrade bool
	}{
		{"still Upgrade as writer", upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderUpgrade, "writer")), true},
		{"switched to Report", upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderReport, "writer")), false},
		{"switched to Off", upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderOff, "writer")), false},
		{"rerender unset, --default-rerender Off", upgradeModeCR("hr", upgradeAs("", "writer")), false},
		{"another writer", upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderUpgrade, "deployer")), false},
		{"suspended", upgradeModeCR("hr", func(s *v1alpha1.HelmReleaseSpec) { upgradeAs(v1alpha1.RerenderUpgrade, "writer")(s); s.Suspend = true }), false},
		{"deleted", upgradeModeCR("another", upgradeAs(v1alpha1.RerenderUpgrade, "writer")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := chartSecret(t, "deployed", 1)
			up := &upgrades{}
			tw, _, _ := twoWayController(t, tt.cr, &renders{results: []renderAnswer{staleRender("changed")}}, up, secret)
			key := hrKey
			rs := queueRender(t, tw, secret, key, "writer", v1alpha1.RerenderUpgrade)
			if _, err := tw.Render(context.Background(), key); err != nil {
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
	tw, clk, events := twoWayController(t, upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderUpgrade, "writer")), r, up, secret)
	key := hrKey
	rs := queueRender(t, tw, secret, key, "writer", v1alpha1.RerenderUpgrade)
	start := clk.Now()
	render := func(after time.Duration, answer renderAnswer) time.Duration {
		t.Helper()
		clk.SetTime(start.Add(after))
		r.results, r.calls = []renderAnswer{answer}, 0
		again, err := tw.Render(context.Background(), key)
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
	hr := upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderUpgrade, "writer"))
	tw, clk, _ := twoWayController(t, hr, r, up, secret)
	tw.cfg.UpgradeMaxPerHour = 2
	tw.upgrades = throttle.New[v1alpha1.ReleaseKey](throttle.Options{Interval: time.Minute, MaxPerHour: 2}, clk)
	key := hrKey
	rs := queueRender(t, tw, secret, key, "writer", v1alpha1.RerenderUpgrade)
	start := clk.Now()
	var again time.Duration
	for i, at := range []time.Duration{0, 10 * time.Minute, 30 * time.Minute} {
		clk.SetTime(start.Add(at))
		r.results, r.calls = []renderAnswer{staleRender(string(rune('a' + i)))}, 0
		var err error
		if again, err = tw.Render(context.Background(), key); err != nil {
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

// TestFailedUpgradeKeptUntilOneSucceeds: while another upgrade is tried,
// the lock still holds past the revision the last failure left; a try
// that fails without Helm writing anything keeps that revision in the new
// record; one that succeeds forgets the failure, and the status with it.
func TestFailedUpgradeKeptUntilOneSucceeds(t *testing.T) {
	first, failed := chartSecret(t, "deployed", 1), chartSecret(t, "failed", 2)
	rk := v1alpha1.ReleaseKey{Namespace: "apps", Name: "rel"}
	up := &upgrades{fail: errors.New("the release changed")}
	r := &renders{results: []renderAnswer{staleRender("second")}}
	tw, clk, _ := twoWayController(t, upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderUpgrade, "writer")), r, up, first, failed)
	tw.failedUpgrades.Set(rk, v1alpha1.FailedUpgrade{Release: rk, RenderDigest: "the first render", Revision: 2, SecretUID: string(failed.UID)})
	key := hrKey
	queueRender(t, tw, first, key, "writer", v1alpha1.RerenderUpgrade)
	heldPast := 0
	up.before = func() {
		if tw.FailedByUpgrade(rk, 2, failed.UID) {
			heldPast++
		}
	}
	if _, err := tw.Render(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	f, ok := tw.failedUpgrades.Get(rk)
	if up.calls != 1 || heldPast != 1 || !ok || f.Revision != 2 || f.RenderDigest == "the first render" || f.Error != "the release changed" {
		t.Errorf("%d upgrades, held past revision 2 during %d; then %+v: want revision 2 still held past, for the new render", up.calls, heldPast, f)
	}

	up.fail = nil
	r.results, r.calls = []renderAnswer{staleRender("third")}, 0
	clk.SetTime(clk.Now().Add(time.Hour))
	if _, err := tw.Render(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if f, ok := tw.failedUpgrades.Get(rk); up.calls != 2 || ok {
		t.Errorf("%d upgrades, then the failure %+v still remembered; want it forgotten once an upgrade succeeds", up.calls, f)
	}
}
