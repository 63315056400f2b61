package twoway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// TestServedChanges: only group-versions count, not their kinds, and
// each change is named once, in order.
func TestServedChanges(t *testing.T) {
	tests := []struct {
		name     string
		was, now []string
		want     []string
	}{
		{"same", []string{"v1", "v1/Pod", "apps/v1", "apps/v1/Deployment"}, []string{"apps/v1/Deployment", "apps/v1", "v1/Pod", "v1"}, nil},
		{"a kind alone", []string{"v1", "v1/Pod"}, []string{"v1", "v1/Pod", "v1/Service"}, nil},
		{"served", []string{"v1"}, []string{"v1", "a.example.com/v1", "a.example.com/v1/Widget"}, []string{"a.example.com/v1 is now served"}},
		{"no longer served", []string{"v1", "policy/v1beta1", "policy/v1beta1/PodSecurityPolicy"}, []string{"v1"}, []string{"policy/v1beta1 is no longer served"}},
		{"both", []string{"b/v1", "a/v1"}, []string{"c/v1", "b/v2"}, []string{"a/v1 is no longer served", "b/v1 is no longer served", "b/v2 is now served", "c/v1 is now served"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := servedChanges(tt.was, tt.now)
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderCause: what happened since the last render is the cause; a
// stale render with nothing new keeps the last cause; the first render
// says the revision renders differently now; a lookup of the release's
// own object is named as such.
func TestRenderCause(t *testing.T) {
	stale := &renderResult{stale: true, status: v1alpha1.RenderStatus{Cause: "lookup of ConfigMap apps/settings changed"}}
	tests := []struct {
		name   string
		causes []string
		prev   *renderResult
		own    []string
		want   string
	}{
		{"a lookup", []string{"lookup of ConfigMap apps/settings changed"}, nil, nil, "lookup of ConfigMap apps/settings changed"},
		{"two causes", []string{"Kubernetes v1.37.0 (was v1.36.3)", "policy/v1beta1 is no longer served"}, nil, nil, "Kubernetes v1.37.0 (was v1.36.3); policy/v1beta1 is no longer served"},
		{"the first render", nil, nil, nil, "revision 3 renders differently now than when Helm rendered it"},
		{"a new revision", []string{"revision 3 was deployed"}, nil, nil, "revision 3 renders differently now than when Helm rendered it"},
		{"nothing new, still stale", nil, stale, nil, "lookup of ConfigMap apps/settings changed"},
		{"its own object", nil, nil, []string{"Secret apps/grafana"}, "revision 3 renders differently now than when Helm rendered it (it looks up Secret apps/grafana, which the release itself declares)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renderCause(3, tt.causes, tt.prev, tt.own); got != tt.want {
				t.Errorf("renderCause = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRenderChangesBounded: status.rerender holds at most
// MaxRenderChanges objects of at most MaxRenderPaths paths each, and
// counts the rest.
func TestRenderChangesBounded(t *testing.T) {
	var changes []render.Change
	for i := range v1alpha1.MaxRenderChanges + 5 {
		var paths []string
		for j := range v1alpha1.MaxRenderPaths + 3 {
			paths = append(paths, fmt.Sprintf("/data/k%d", j))
		}
		changes = append(changes, render.Change{Object: fmt.Sprintf("ConfigMap apps/c%d", i), Paths: paths})
	}
	got, more := renderChanges(changes)
	if len(got) != v1alpha1.MaxRenderChanges || more != 5 {
		t.Errorf("%d changes and %d more, want %d and 5", len(got), more, v1alpha1.MaxRenderChanges)
	}
	for _, c := range got {
		if len(c.Paths) != v1alpha1.MaxRenderPaths {
			t.Errorf("%s has %d paths, want %d", c.Object, len(c.Paths), v1alpha1.MaxRenderPaths)
		}
	}
	if msg := describeChanges(got[:1], more); msg != "ConfigMap apps/c0 at "+strings.Join(got[0].Paths, ", ")+"; 5 more objects" {
		t.Errorf("describeChanges = %q", msg)
	}
}

// TestDeclaredLookups: a lookup of an object the manifest declares, in
// the release namespace when the manifest names none, is the release's
// own; lists and other objects are not.
func TestDeclaredLookups(t *testing.T) {
	rel := &render.Release{Helm: manifest.Helm3, Namespace: "apps", Manifest: `---
# Source: c/templates/secret.yaml
apiVersion: v1
kind: Secret
metadata:
  name: grafana
---
# Source: c/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: other
  namespace: elsewhere
`}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	lookups := []render.Lookup{
		{GVR: secrets, Kind: "Secret", Namespace: "apps", Name: "grafana"},
		{GVR: secrets, Kind: "Secret", Namespace: "other", Name: "grafana"},
		{GVR: cms, Kind: "ConfigMap", Namespace: "elsewhere", Name: "other"},
		{GVR: cms, Kind: "ConfigMap", Namespace: "apps", Name: "other"},
		{GVR: secrets, Kind: "Secret", Namespace: "apps"},
	}
	want := []string{"Secret apps/grafana", "ConfigMap elsewhere/other"}
	if diff := cmp.Diff(want, declaredLookups(rel, lookups)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestTrust: Off reports nothing and forgets; a lock that holds a
// verified revision asks for its render, once per revision; until then
// Rendered is Unknown; a render of the target is reported as found.
func TestTrust(t *testing.T) {
	r, _ := newRenders(t, nil, nil, nil)
	key := hrKey
	l := Lock{Release: v1alpha1.ReleaseKey{Name: "web", Namespace: "apps"}, Writer: "writer", Mode: v1alpha1.RerenderReport}

	rep := r.Trust(key, l)
	if !rep.Waiting || rep.Status != nil || rep.Rendered.Status != metav1.ConditionUnknown || rep.Rendered.Reason != v1alpha1.ReasonNotRendered {
		t.Errorf("before the lock holds a verified revision, the report is %+v, want Unknown/NotRendered", rep)
	}
	if n := r.queue.Len(); n != 0 {
		t.Errorf("%d renders queued before the lock holds anything", n)
	}

	// The lock holds revision 3, which Helm was not seen to apply:
	// revision 2, the verified one, is what the controller says it
	// trusts.
	l.Holding = true
	l.Chart = &v1alpha1.ChartRevision{Revision: 2, ManifestDigest: "d2"}
	r.Trust(key, l)
	rs, ok := r.states.Get(key)
	if !ok || rs.target.revision != 2 || rs.target.writer != "writer" || !slices.Contains(rs.causes, "revision 2 was deployed") {
		t.Fatalf("render state %+v: want revision 2 as writer, caused by its deployment", rs)
	}
	rs.rendered = rs.target
	rs.result = &renderResult{cond: condition(v1alpha1.ConditionRendered, true, v1alpha1.ReasonRendersAsStored, "as stored"), status: v1alpha1.RenderStatus{Revision: 2}}
	rep = r.Trust(key, l)
	if rep.Status == nil || rep.Rendered.Reason != v1alpha1.ReasonRendersAsStored || rep.Status.Revision != 2 {
		t.Errorf("after the render, the report is %+v", rep)
	}

	l.Mode = v1alpha1.RerenderOff
	if rep := r.Trust(key, l); !rep.Off || rep.Status != nil {
		t.Errorf("Off reported %+v", rep)
	}
	if _, ok := r.states.Get(key); ok {
		t.Error("Off kept the render state")
	}
}

func findCond(conds []metav1.Condition) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == v1alpha1.ConditionRendered {
			return &conds[i]
		}
	}
	return nil
}

// TestPlaced: a namespaced object whose manifest names no namespace is
// named in the release's, as Helm applies it; a cluster-scoped one, or one
// of a kind the mapper does not know, keeps no namespace.
func TestPlaced(t *testing.T) {
	// As a discovery mapper does, it maps a kind without a version.
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	r, _ := newRenders(t, nil, func(cfg *Config) { cfg.Mapper = resettable{mapper} }, nil)
	got := r.placed([]render.Change{
		{Object: "ConfigMap app", Kind: "ConfigMap", Name: "app"},
		{Object: "ConfigMap other/app", Kind: "ConfigMap", Namespace: "other", Name: "app"},
		{Object: "Widget w", Group: "example.com", Kind: "Widget", Name: "w"},
	}, "apps")
	var names []string
	for _, ch := range got {
		names = append(names, ch.Object)
	}
	if diff := cmp.Diff([]string{"ConfigMap apps/app", "ConfigMap other/app", "Widget w"}, names); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestClusterLearnedOnlyWhenRendering: a locker whose locks render nothing
// asks the API server nothing when CRDs change or its watches reconnect;
// what it would have learned is learned before the next render.
func TestClusterLearnedOnlyWhenRendering(t *testing.T) {
	r, f := newRenders(t, nil, nil, nil)
	kube := f.kube
	versionReads := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "version" {
				n++
			}
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watchCluster(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	if _, err := r.clusterFacts(); err != nil {
		t.Fatal(err)
	}
	if n := versionReads(); n != 1 {
		t.Fatalf("%d reads of /version for the first render, want 1", n)
	}
	// Nothing renders: the move is noted, not read.
	r.ClusterMoved()
	waitFor(t, func() bool { r.cluster.mu.Lock(); defer r.cluster.mu.Unlock(); return !r.cluster.known })
	if n := versionReads(); n != 1 {
		t.Errorf("%d reads of /version after a move with nothing rendering, want still 1", n)
	}
	if _, err := r.clusterFacts(); err != nil {
		t.Fatal(err)
	}
	if n := versionReads(); n != 2 {
		t.Errorf("%d reads of /version once a render needs the facts again, want 2", n)
	}
	// A release renders: a move is read at once.
	r.states.Set(cache.NewObjectName("r", "a"), &renderState{})
	r.ClusterMoved()
	waitFor(t, func() bool { return versionReads() == 3 })
}

// TestRenderReportsWhatItReads: a render that fails still says that its
// chart declares a kubeVersion, so that the next Kubernetes version
// renders it again; a Secret rewritten since it was verified, its
// manifest or in place under it its chart, is never rendered.
func TestRenderReportsWhatItReads(t *testing.T) {
	chart := map[string]any{"metadata": map[string]any{"name": "web", "version": "1.0.0", "apiVersion": "v2", "kubeVersion": ">=9.0.0-0"}}
	secret := releaseSecretWith(t, "deployed", 1, func(rel map[string]any) { rel["chart"] = chart })
	r, _ := newRenders(t, nil, nil, nil, secret)
	stored, err := storage.Read(secret, "apps", "rel")
	if err != nil {
		t.Fatal(err)
	}
	target := renderTarget{release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, revision: 1, digest: storage.Digest(manifestYAML), chartDigest: stored.ChartDigest(), writer: "writer", mode: v1alpha1.RerenderReport}

	res, _, _, err := r.render(context.Background(), cache.ObjectName{}, &renderState{}, target, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.cond.Status != metav1.ConditionFalse || !res.readsKubeVersion {
		t.Errorf("render = %+v, reads kubeVersion %v: want a failure that still reads the Kubernetes version", res.cond, res.readsKubeVersion)
	}

	for _, rewritten := range []renderTarget{
		{release: target.release, revision: 1, digest: "another manifest", chartDigest: target.chartDigest, writer: "writer", mode: v1alpha1.RerenderReport},
		{release: target.release, revision: 1, digest: target.digest, chartDigest: "another chart", writer: "writer", mode: v1alpha1.RerenderReport},
	} {
		res, _, _, err = r.render(context.Background(), cache.ObjectName{}, &renderState{}, rewritten, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.cond.Reason != v1alpha1.ReasonUnverifiedChart || !strings.Contains(res.cond.Message, "revision 1 was verified with: it was rewritten since") {
			t.Errorf("render of a rewritten Secret = %+v, want UnverifiedChart saying it was rewritten", res.cond)
		}
	}
}

// TestUnwatchableLookup: a lookup of a type the locker may not watch
// (its RBAC refuses the list) is named, so that the report says it may be
// stale rather than Rendered=True for good; one it may watch is not.
func TestUnwatchableLookup(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	r, _ := newRenders(t, nil, nil, func(dyn *dynamicfake.FakeDynamicClient) {
		dyn.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(secrets.GroupResource(), "", fmt.Errorf("RBAC: no"))
		})
	})
	key := hrKey
	rk := v1alpha1.ReleaseKey{Namespace: "apps", Name: "rel"}
	forbidden := []render.Lookup{{GVR: cmGVR, Kind: "ConfigMap", Namespace: "apps", Name: "settings"}, {GVR: secrets, Kind: "Secret", Namespace: "apps", Name: "token"}}
	r.watchLookups(key, rk, forbidden)
	if err := r.unwatchable(context.Background(), forbidden); err == nil || !strings.Contains(err.Error(), "may not watch secrets") || !strings.Contains(err.Error(), "Secret apps/token") {
		t.Errorf("unwatchable = %v, want an error naming the Secret lookup", err)
	}
	allowed := forbidden[:1]
	r.watchLookups(key, rk, allowed)
	if err := r.unwatchable(context.Background(), allowed); err != nil {
		t.Errorf("unwatchable of a ConfigMap lookup = %v, want none", err)
	}
}

// TestFailedRenderKeepsItsLookups: a render that fails (here, its
// revision's Secret is gone) names no lookups, but the ones the last
// render made are still what a change would show: their watches stay.
func TestFailedRenderKeepsItsLookups(t *testing.T) {
	template := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: {{ (lookup \"v1\" \"ConfigMap\" \"apps\" \"settings\").data.k | quote }}\n"
	chart := map[string]any{
		"metadata":  map[string]any{"name": "web", "version": "1.0.0", "apiVersion": "v2"},
		"templates": []any{map[string]any{"name": "templates/cm.yaml", "data": []byte(template)}},
	}
	secret := releaseSecretWith(t, "deployed", 1, func(rel map[string]any) { rel["chart"] = chart })
	// Lookups impersonate the writer: here, through the fake.
	r, f := newRenders(t, nil, nil, nil, secret)
	dyn := f.dyn
	stored, err := storage.Read(secret, "apps", "rel")
	if err != nil {
		t.Fatal(err)
	}
	key := hrKey
	target := renderTarget{release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, revision: 1, digest: storage.Digest(manifestYAML), chartDigest: stored.ChartDigest(), writer: "writer", mode: v1alpha1.RerenderReport}
	r.states.Set(key, &renderState{target: target})
	// The fake's tracker keeps built-in kinds typed, as its lists
	// return them.
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "apps"}, Data: map[string]string{"k": "1"}}
	if err := dyn.Tracker().Add(settings); err != nil {
		t.Fatal(err)
	}
	// changeRenders changes the looked-up ConfigMap and reports whether
	// a render of key was queued for it.
	changeRenders := func(value string) bool {
		for r.queue.Len() > 0 {
			k, _ := r.queue.Get()
			r.queue.Done(k)
			r.queue.Forget(k)
		}
		settings.Data = map[string]string{"k": value}
		if err := dyn.Tracker().Update(cmGVR, settings, "apps"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if r.queue.Len() > 0 {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	if _, err := r.Render(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if !changeRenders("2") {
		t.Fatal("a change of what the chart looked up queued no render")
	}
	if err := f.kube.CoreV1().Secrets("apps").Delete(context.Background(), secret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Render(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if rs, _ := r.states.Get(key); rs.result == nil || rs.result.cond.Reason != v1alpha1.ReasonRenderFailed {
		t.Fatalf("the render of a revision whose Secret is gone = %+v, want RenderFailed", rs.result)
	}
	if !changeRenders("3") {
		t.Error("after a failed render, a change of what the last render looked up queued no render: its watch was dropped")
	}
}

// TestRenderChangedOncePerCause: a lookup that flaps, between two
// differences or between a difference and what is stored, makes one
// RenderChanged event, not one a flip; a new cause makes another, two
// causes by turns one each, and a cause is said again once
// reannounceAfter has passed. Each render still reports its own finding.
func TestRenderChangedOncePerCause(t *testing.T) {
	const settings, kube = "lookup of ConfigMap apps/settings changed", "Kubernetes v1.37.0 (was v1.36.3)"
	secret := chartSecret(t, "deployed", 1)
	r := &renders{}
	tw, clk, events := twoWayController(t, upgradeModeCR("hr", upgradeAs(v1alpha1.RerenderReport, "writer")), r, &upgrades{}, secret)
	rs := queueRender(t, tw, secret, hrKey, "writer", v1alpha1.RerenderReport)
	start := clk.Now()
	asStored := renderAnswer{out: &render.Output{Manifest: manifestYAML}}
	steps := []struct {
		after  time.Duration
		cause  string
		answer renderAnswer
		event  bool
	}{
		{0, settings, staleRender("flip-0"), true},
		{time.Second, settings, staleRender("flip-1"), false},
		{2 * time.Second, settings, staleRender("flip-0"), false},
		{3 * time.Second, "", staleRender("flip-1"), false},
		{4 * time.Second, settings, asStored, false},
		{5 * time.Second, settings, staleRender("flip-1"), false},
		{6 * time.Second, kube, staleRender("flip-1"), true},
		// Two causes by turns: each was said.
		{7 * time.Second, settings, staleRender("flip-0"), false},
		{8 * time.Second, kube, staleRender("flip-1"), false},
		{9 * time.Second, settings, asStored, false},
		{reannounceAfter, settings, staleRender("flip-1"), true},
		{reannounceAfter + time.Second, kube, staleRender("flip-0"), false},
	}
	for i, s := range steps {
		clk.SetTime(start.Add(s.after))
		rs.causes = nil
		if s.cause != "" {
			rs.causes = []string{s.cause}
		}
		r.results, r.calls = []renderAnswer{s.answer}, 0
		if _, err := tw.Render(context.Background(), hrKey); err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(events.Events) > 0 {
			if e := <-events.Events; strings.Contains(e, EventRenderChanged) {
				got = append(got, e)
			}
		}
		if (len(got) == 1) != s.event || len(got) > 1 {
			t.Errorf("render %d (%q): RenderChanged events %q, want one: %v", i, s.cause, got, s.event)
		}
		if want := s.answer != asStored; rs.result.stale != want {
			t.Errorf("render %d: stale = %v, want %v", i, rs.result.stale, want)
		}
	}
}

// TestNewlyStale: a stale render is news after none, after one as
// stored, and for another revision or cause; not for another difference
// of the same cause.
func TestNewlyStale(t *testing.T) {
	stale := func(revision int, cause, digest string) *renderResult {
		return &renderResult{stale: true, digest: digest, status: v1alpha1.RenderStatus{Revision: revision, Cause: cause}}
	}
	tests := []struct {
		name      string
		prev, res *renderResult
		want      bool
	}{
		{"first render", nil, stale(1, "a", "x"), true},
		{"after one as stored", &renderResult{status: v1alpha1.RenderStatus{Revision: 1}}, stale(1, "a", "x"), true},
		{"same cause, another difference", stale(1, "a", "x"), stale(1, "a", "y"), false},
		{"another cause", stale(1, "a", "x"), stale(1, "b", "x"), true},
		{"another revision", stale(1, "a", "x"), stale(2, "a", "x"), true},
		{"renders as stored", stale(1, "a", "x"), &renderResult{status: v1alpha1.RenderStatus{Revision: 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newlyStale(tt.prev, tt.res); got != tt.want {
				t.Errorf("newlyStale = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAnnounceBounded: within reannounceAfter, at most maxAnnounced causes
// of one revision are said; another revision's are said at once, and the
// first revision's again once they are old.
func TestAnnounceBounded(t *testing.T) {
	var rs renderState
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	stale := func(revision int, cause string) *renderResult {
		return &renderResult{stale: true, status: v1alpha1.RenderStatus{Revision: revision, Cause: cause}}
	}
	said := 0
	for i := range maxAnnounced + 3 {
		if rs.announce(nil, stale(1, fmt.Sprintf("lookup %d changed", i)), start) {
			said++
		}
	}
	if said != maxAnnounced {
		t.Errorf("%d causes said at once, want %d", said, maxAnnounced)
	}
	later := start.Add(reannounceAfter)
	if !rs.announce(nil, stale(1, "lookup 0 changed"), later) {
		t.Error("a cause said reannounceAfter ago was not said again")
	}
	if !rs.announce(nil, stale(2, "lookup 0 changed"), later) {
		t.Error("another revision's cause was not said")
	}
}
