package twoway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// charts is a Charts that answers with artifact or err, and records what
// it was asked.
type charts struct {
	artifact ChartArtifact
	err      error
	have     []string
	unwatch  int
}

func (c *charts) Chart(_ context.Context, _ cache.ObjectName, _ v1alpha1.ChartReference, have string) (ChartArtifact, error) {
	c.have = append(c.have, have)
	if c.err != nil {
		return ChartArtifact{}, c.err
	}
	if have == c.artifact.Digest {
		return ChartArtifact{Revision: c.artifact.Revision, Digest: have}, nil
	}
	return c.artifact, nil
}

func (c *charts) Unwatch(cache.ObjectName) { c.unwatch++ }

// TestRenderChartRef: with spec.chartRef, what its source cannot give is
// Rendered=False with the source's reason, a download that failed is read
// again after a while, a chart other than the stored one is ChartMismatch
// naming the file, and an artifact already held is not downloaded again.
func TestRenderChartRef(t *testing.T) {
	chart := map[string]any{"metadata": map[string]any{"name": "web", "version": "1.0.0", "apiVersion": "v2"},
		"templates": []any{map[string]any{"name": "templates/cm.yaml", "data": []byte("kind: ConfigMap\n")}}}
	secret := releaseSecretWith(t, "deployed", 1, func(rel map[string]any) { rel["chart"] = chart })
	stored, err := storage.Read(secret, "apps", "rel")
	if err != nil {
		t.Fatal(err)
	}
	ref := v1alpha1.ChartReference{Kind: v1alpha1.ChartSourceHelmChart, Name: "web", Namespace: "flux-system"}
	target := renderTarget{release: v1alpha1.ReleaseKey{Name: "rel", Namespace: "apps"}, revision: 1, digest: storage.Digest(manifestYAML),
		chartDigest: stored.ChartDigest(), writer: "writer", mode: v1alpha1.RerenderReport, chartRef: ref}
	other := map[string][]byte{
		"web/Chart.yaml":         []byte("apiVersion: v2\nname: web\nversion: 1.0.0\n"),
		"web/templates/cm.yaml":  []byte("kind: ConfigMap\n"),
		"web/templates/new.yaml": []byte("kind: Secret\n"),
	}
	tests := []struct {
		name          string
		charts        *charts
		reason, says  string
		retry         time.Duration
		chartRevision string
	}{
		{"not served", &charts{err: &ChartSourceError{Reason: v1alpha1.ReasonChartSourceNotServed, Message: "HelmChart flux-system/web: the cluster serves no HelmChart"}},
			v1alpha1.ReasonChartSourceNotServed, "spec.chartRef: HelmChart flux-system/web: the cluster serves no HelmChart", 0, ""},
		{"download failed", &charts{err: &ChartSourceError{Reason: v1alpha1.ReasonChartSourceNotReady, Message: "connection refused", Retry: true}},
			v1alpha1.ReasonChartSourceNotReady, "connection refused", chartRetry, ""},
		{"another chart", &charts{artifact: ChartArtifact{Revision: "1.0.0@sha256:abc", Digest: "sha256:abc", Files: other}},
			v1alpha1.ReasonChartMismatch, "spec.chartRef HelmChart flux-system/web, revision 1.0.0@sha256:abc: the source's chart is not chart web-1.0.0 as revision 1 stored it: templates/new.yaml is in the source, and was not stored; nothing was rendered", 0, "1.0.0@sha256:abc"},
		{"no chart", &charts{artifact: ChartArtifact{Revision: "main@sha1:1", Digest: "sha256:def", Files: map[string][]byte{"README.md": []byte("hi")}}},
			v1alpha1.ReasonInvalidChart, "holds no chart Helm loads", 0, "main@sha1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newRenders(t, nil, func(c *Config) { c.Charts = tt.charts }, nil, secret)
			rs := &renderState{}
			res, rel, _, err := r.render(context.Background(), cache.ObjectName{Namespace: "cattle-helm-system", Name: "rel"}, rs, target, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rel != nil || res.cond.Status != metav1.ConditionFalse || res.cond.Reason != tt.reason || !strings.Contains(res.cond.Message, tt.says) {
				t.Errorf("render = %+v, rendered %t; want Rendered=False %s saying %q", res.cond, rel != nil, tt.reason, tt.says)
			}
			if res.retry != tt.retry || res.status.ChartRevision != tt.chartRevision {
				t.Errorf("retry %v, chart revision %q; want %v, %q", res.retry, res.status.ChartRevision, tt.retry, tt.chartRevision)
			}
			if tt.charts.err != nil {
				return
			}
			// Read again, the artifact held is not downloaded again,
			// and says the same.
			again, _, _, err := r.render(context.Background(), cache.ObjectName{Namespace: "cattle-helm-system", Name: "rel"}, rs, target, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.charts.have; len(got) != 2 || got[0] != "" || got[1] != tt.charts.artifact.Digest {
				t.Errorf("Chart was asked with digests %q, want none held and then %s", got, tt.charts.artifact.Digest)
			}
			if again.cond.Reason != tt.reason || again.cond.Message != res.cond.Message {
				t.Errorf("rendered from the held artifact: %+v, want %+v", again.cond, res.cond)
			}
		})
	}

	t.Run("no reader", func(t *testing.T) {
		r, _ := newRenders(t, nil, nil, nil, secret)
		res, _, _, err := r.render(context.Background(), cache.ObjectName{}, &renderState{}, target, nil, nil)
		if err != nil || res.cond.Reason != v1alpha1.ReasonRenderFailed || !strings.Contains(res.cond.Message, "spec.chartRef") {
			t.Errorf("render without a chart reader = %+v, %v; want RenderFailed naming spec.chartRef", res.cond, err)
		}
	})
	t.Run("read failed", func(t *testing.T) {
		readErr := errors.New("connection reset")
		r, _ := newRenders(t, nil, func(c *Config) { c.Charts = &charts{err: readErr} }, nil, secret)
		if _, _, _, err := r.render(context.Background(), cache.ObjectName{}, &renderState{}, target, nil, nil); !errors.Is(err, readErr) {
			t.Errorf("render error %v, want the read's, to retry", err)
		}
	})
}
