package upgrade

import (
	"context"
	"errors"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	driverv3 "helm.sh/helm/v3/pkg/storage/driver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/helm-locker/helm-locker/internal/render"
)

// TestCheckStoredChart: an upgrade goes ahead only while the revision's
// Secret holds the chart and values it was read with; rewritten in place
// since, as a Secret writer can, it is refused before Helm reads them.
func TestCheckStoredChart(t *testing.T) {
	for _, tt := range []struct {
		name    string
		rewrite func(*release.Release)
		wantErr error
	}{
		{"as read", nil, nil},
		{"written again by Helm, superseded", func(r *release.Release) { r.Info.Status = release.StatusSuperseded }, nil},
		{"values rewritten", func(r *release.Release) { r.Config = map[string]any{"greeting": "forged"} }, ErrReleaseChanged},
		{"a template rewritten", func(r *release.Release) { r.Chart.Templates[0].Data = []byte("kind: RoleBinding") }, ErrReleaseChanged},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			kube := fake.NewClientset()
			secrets := driverv3.NewSecrets(kube.CoreV1().Secrets("apps"))
			installed := installedWeb()
			if err := secrets.Create("sh.helm.release.v1.demo.v1", installed); err != nil {
				t.Fatal(err)
			}
			stored, err := kube.CoreV1().Secrets("apps").Get(ctx, "sh.helm.release.v1.demo.v1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rel, err := render.DecodeUntrusted(stored, "apps", "demo")
			if err != nil {
				t.Fatal(err)
			}
			if tt.rewrite != nil {
				again := installedWeb()
				tt.rewrite(again)
				if err := secrets.Update("sh.helm.release.v1.demo.v1", again); err != nil {
					t.Fatal(err)
				}
			}
			if err := checkStoredChart(ctx, kube, rel); !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("checkStoredChart = %v, want %v", err, tt.wantErr)
			}
		})
	}
}
