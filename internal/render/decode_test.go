package render

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/helm-locker/helm-locker/internal/storage"
)

// secretsCapture is the one call Helm's Secret driver makes to create a
// release Secret.
type secretsCapture struct {
	typedcorev1.SecretInterface
	namespace string
	created   *corev1.Secret
}

func (s *secretsCapture) Create(_ context.Context, secret *corev1.Secret, _ metav1.CreateOptions) (*corev1.Secret, error) {
	s.created = secret.DeepCopy()
	s.created.Namespace = s.namespace
	return secret, nil
}

// helmSecret is the Secret Helm's own driver writes for rel in its
// namespace, as the API server returns it.
func helmSecret(t *testing.T, rel *release.Release) *corev1.Secret {
	capture := &secretsCapture{namespace: rel.Namespace}
	if err := driver.NewSecrets(capture).Create(storage.SecretName(rel.Name, rel.Version), rel); err != nil {
		t.Fatal(err)
	}
	return capture.created
}

func TestDecode(t *testing.T) {
	c, _ := fakeCluster()
	stored := install(t, releaseOf(loadDashboard(t), map[string]any{"adminPassword": "s3cret"}, 1), c)
	stored.Version = 3
	good := helmSecret(t, stored)

	rel, err := Decode(good, "apps", "web")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stored.Config, rel.Config); diff != "" {
		t.Errorf("Config (-stored +decoded):\n%s", diff)
	}
	if len(rel.Chart.Templates) != len(stored.Chart.Templates) || rel.Manifest != stored.Manifest || rel.Version != 3 {
		t.Errorf("decoded %d templates, revision %d; want %d, 3, and the manifest", len(rel.Chart.Templates), rel.Version, len(stored.Chart.Templates))
	}
	// The decoded release renders what was stored.
	out, err := Render(context.Background(), rel, c)
	if err != nil {
		t.Fatal(err)
	}
	if out.Manifest != stored.Manifest {
		t.Error("the decoded release renders another manifest")
	}

	// holding is good carrying the release of another Secret.
	holding := func(edit func(*release.Release)) func(*corev1.Secret) {
		return func(s *corev1.Secret) {
			other := *stored
			edit(&other)
			s.Data = helmSecret(t, &other).Data
		}
	}
	tests := []struct {
		name string
		edit func(*corev1.Secret)
		want string
	}{
		{"another release", holding(func(r *release.Release) { r.Name = "api" }), "holds revision 3 of release apps/api"},
		{"another namespace", holding(func(r *release.Release) { r.Namespace = "kube-system" }), "holds revision 3 of release kube-system/web"},
		{"another revision", holding(func(r *release.Release) { r.Version = 2 }), "holds revision 2 of release apps/web"},
		{"no chart", holding(func(r *release.Release) { r.Chart = nil }), "holds no chart to render"},
		{"not Helm's", func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }, `has type "Opaque"`},
		{"not a release", func(s *corev1.Secret) { s.Data["release"] = []byte("bm90IGd6aXA=") }, "decoding release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good.DeepCopy()
			tt.edit(s)
			_, err := Decode(s, "apps", "web")
			var invalid *storage.InvalidError
			if !errors.As(err, &invalid) || invalid.Secret != "apps/sh.helm.release.v1.web.v3" || !strings.Contains(invalid.Problem, tt.want) {
				t.Errorf("Decode error %v, want an InvalidError naming apps/sh.helm.release.v1.web.v3 saying %q", err, tt.want)
			}
		})
	}
}
