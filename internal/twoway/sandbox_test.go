package twoway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/sandbox"
	"github.com/helm-locker/helm-locker/internal/storage"
)

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

// TestRenderStopped: a render the sandbox stopped at its deadline or its
// memory cap, first or again, is Rendered=False with its own reason,
// naming what it looked up before it was stopped; it is not retried. The
// other errors keep their reasons.
func TestRenderStopped(t *testing.T) {
	tuning := render.Lookup{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespace: "apps", Name: "tuning"}
	timeout := &sandbox.TimeoutError{Timeout: 10 * time.Second, Lookups: []render.Lookup{tuning}}
	tooLarge := &sandbox.TooLargeError{Limit: 256 << 20, Detail: "fatal error: runtime: out of memory", Lookups: []render.Lookup{tuning}}
	forbidden := &render.LookupError{Lookup: tuning, Err: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "tuning", errors.New("no"))}
	stale := renderAnswer{out: &render.Output{Manifest: "---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n"}}
	tests := []struct {
		name     string
		results  []renderAnswer
		reason   string
		contains []string
	}{
		{"timeout", []renderAnswer{{err: timeout}}, v1alpha1.ReasonRenderTimeout,
			[]string{"rendering revision 1: the render ran longer than 10s and was stopped (--render-timeout), after it looked up ConfigMap apps/tuning; it is rendered again when"}},
		{"timeout, rendered again", []renderAnswer{stale, {err: timeout}}, v1alpha1.ReasonRenderTimeout,
			[]string{"rendering revision 1 again: the render ran longer than 10s"}},
		{"memory", []renderAnswer{{err: tooLarge}}, v1alpha1.ReasonRenderTooLarge,
			[]string{"took more than its 256 MiB of memory and was stopped (fatal error: runtime: out of memory) (--render-memory-limit), after it looked up ConfigMap apps/tuning"}},
		{"output", []renderAnswer{{err: &sandbox.TooLargeError{Limit: 16 << 20, Output: true}}}, v1alpha1.ReasonRenderTooLarge,
			[]string{"sent back more than 16 MiB and was stopped; it is rendered again"}},
		{"forbidden", []renderAnswer{{err: forbidden}}, v1alpha1.ReasonRenderForbidden,
			[]string{"lookup of ConfigMap apps/tuning is forbidden to system:serviceaccount:apps:writer"}},
		{"the chart fails", []renderAnswer{{err: errors.New("chart web-1.0.0: the chart says no")}}, v1alpha1.ReasonRenderFailed,
			[]string{"rendering revision 1: chart web-1.0.0: the chart says no"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chart := map[string]any{"metadata": map[string]any{"name": "web", "version": "1.0.0", "apiVersion": "v2"}}
			secret := releaseSecretWith(t, "deployed", 1, func(rel map[string]any) { rel["chart"] = chart })
			r := &renders{results: tt.results}
			// Lookups impersonate the writer: here, through the fake.
			rr, _ := newRenders(t, nil, func(cfg *Config) { cfg.Renderer = r }, nil, secret)
			stored, err := storage.Read(secret, "apps", "rel")
			if err != nil {
				t.Fatal(err)
			}
			target := renderTarget{release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, revision: 1, digest: storage.Digest(manifestYAML), chartDigest: stored.ChartDigest(), writer: "writer", mode: v1alpha1.RerenderReport}
			res, rel, _, err := rr.render(context.Background(), cache.ObjectName{}, &renderState{}, target, nil, nil)
			if err != nil {
				t.Fatalf("render returned %v: a stopped render is reported, not retried", err)
			}
			if r.calls != len(tt.results) {
				t.Errorf("%d renders, want %d", r.calls, len(tt.results))
			}
			if res.cond.Status != metav1.ConditionFalse || res.cond.Reason != tt.reason || res.stale {
				t.Errorf("Rendered = %s/%s (stale %v), want False/%s", res.cond.Status, res.cond.Reason, res.stale, tt.reason)
			}
			for _, s := range tt.contains {
				if !strings.Contains(res.cond.Message, s) {
					t.Errorf("message %q lacks %q", res.cond.Message, s)
				}
			}
			if rel != nil {
				t.Error("a failed render returned its release, as a render that succeeded does")
			}
		})
	}
}
