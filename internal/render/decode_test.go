package render

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	driverv4 "helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
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

// helm4Secret is the Secret Helm 4's own driver writes for rel in its
// namespace, as the API server returns it.
func helm4Secret(t *testing.T, rel *releasev4.Release) *corev1.Secret {
	capture := &secretsCapture{namespace: rel.Namespace}
	if err := driverv4.NewSecrets(capture).Create(storage.SecretName(rel.Name, rel.Version), rel); err != nil {
		t.Fatal(err)
	}
	return capture.created
}

func TestDecode(t *testing.T) {
	c, _ := fakeCluster()
	stored := install(t, releaseOf(loadDashboard(t), map[string]any{"adminPassword": "s3cret"}, 1), c)
	stored.Version = 3
	good := helmSecret(t, stored)

	// byHelm4 is stored as Helm 4 writes it, with apply method method:
	// rendered by Helm 4, which keeps the line breaks that end each
	// document.
	byHelm4 := func(method string) *corev1.Secret {
		rel := decoded(as(t, manifest.Helm4, stored)).(*releasev4.Release)
		out, err := Render(context.Background(), fromHelm4(rel), c)
		if err != nil {
			t.Fatal(err)
		}
		rel.Manifest, rel.ApplyMethod = out.Manifest, method
		return helm4Secret(t, rel)
	}
	for _, tt := range []struct {
		name   string
		secret *corev1.Secret
		want   manifest.Helm
	}{
		{"Helm 3", good, manifest.Helm3},
		{"Helm 4, server-side", byHelm4("ssa"), manifest.Helm4},
		{"Helm 4, client-side", byHelm4("csa"), manifest.Helm4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rel, err := DecodeUntrusted(tt.secret, "apps", "web")
			if err != nil {
				t.Fatal(err)
			}
			if rel.Helm != tt.want {
				t.Errorf("Decode says %s wrote the revision, want %s", rel.Helm, tt.want)
			}
			// In the types of the Helm that wrote it, config and
			// templates whole.
			raw, err := json.Marshal(decoded(rel))
			if err != nil {
				t.Fatal(err)
			}
			var got release.Release
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if _, v4 := decoded(rel).(*releasev4.Release); v4 != (tt.want == manifest.Helm4) {
				t.Errorf("decoded into %T", decoded(rel))
			}
			if diff := cmp.Diff(stored.Config, got.Config); diff != "" {
				t.Errorf("Config (-stored +decoded):\n%s", diff)
			}
			if len(got.Chart.Templates) != len(stored.Chart.Templates) || rel.Version != 3 || rel.Name != "web" || rel.Namespace != "apps" || rel.Chart != "dashboard-8.5.1" || rel.KubeVersion != ">=1.25.0-0" {
				t.Errorf("decoded %d templates, revision %d of %s/%s, chart %s (kubeVersion %q); want %d, 3 of apps/web, dashboard-8.5.1 (>=1.25.0-0)",
					len(got.Chart.Templates), rel.Version, rel.Namespace, rel.Name, rel.Chart, rel.KubeVersion, len(stored.Chart.Templates))
			}
			// The decoded release renders what was stored.
			out, err := Render(context.Background(), rel, c)
			if err != nil {
				t.Fatal(err)
			}
			if out.Manifest != rel.Manifest || rel.Manifest != got.Manifest {
				t.Error("the decoded release renders another manifest")
			}
		})
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
			_, err := DecodeUntrusted(s, "apps", "web")
			var invalid *storage.InvalidError
			if !errors.As(err, &invalid) || invalid.Secret != "apps/sh.helm.release.v1.web.v3" || !strings.Contains(invalid.Problem, tt.want) {
				t.Errorf("Decode error %v, want an InvalidError naming apps/sh.helm.release.v1.web.v3 saying %q", err, tt.want)
			}
		})
	}
}

// TestAsHelm3: a revision Helm 4 wrote reads in Helm 3's types as it was
// stored, but for its apply method; one Helm 3 wrote is the one decoded.
func TestAsHelm3(t *testing.T) {
	c, _ := fakeCluster()
	stored := install(t, releaseOf(loadDashboard(t), map[string]any{"adminPassword": "s3cret"}, 1), c)
	stored.Info.Description = "Upgrade complete"
	for _, h := range helms {
		rel := as(t, h, stored)
		got, err := rel.AsHelm3()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(stored)
		have, _ := json.Marshal(got)
		if diff := cmp.Diff(string(want), string(have)); diff != "" {
			t.Errorf("%s: AsHelm3 (-stored +got):\n%s", h, diff)
		}
		if (got == stored) != (h == manifest.Helm3) {
			t.Errorf("%s: AsHelm3 returned the release decoded: %t", h, got == stored)
		}
	}
}

// trustedOf is what a lock's verification records of the revision s
// holds, as the controller records it.
func trustedOf(t *testing.T, s *corev1.Secret) Trusted {
	t.Helper()
	rel, err := storage.Read(s, s.Namespace, s.Labels[storage.LabelName])
	if err != nil {
		t.Fatal(err)
	}
	return Trusted{Revision: rel.Version, ManifestDigest: storage.Digest(rel.Manifest), ChartDigest: rel.ChartDigest()}
}

// TestDecodeOnlyWhatWasVerified: a Secret whose chart or values were
// rewritten in place under the same manifest, as a tenant who may write
// Secrets can, is never decoded for a render; one Helm itself wrote again
// (marking it superseded, with the types it decoded it into) still is.
func TestDecodeOnlyWhatWasVerified(t *testing.T) {
	for _, h := range []manifest.Helm{manifest.Helm3, manifest.Helm4} {
		secret := installedBy(t, h, "testdata/null-probe", nil)
		trusted := trustedOf(t, secret)
		// rewrite is secret with its release edited in the types of
		// h, then written by h's own Secret driver.
		rewrite := func(edit3 func(*release.Release), edit4 func(*releasev4.Release)) *corev1.Secret {
			raw, err := storage.DecodeJSON(secret.Data["release"])
			if err != nil {
				t.Fatal(err)
			}
			if h == manifest.Helm3 {
				var rel release.Release
				if err := json.Unmarshal(raw, &rel); err != nil {
					t.Fatal(err)
				}
				edit3(&rel)
				return helmSecret(t, &rel)
			}
			var rel releasev4.Release
			if err := json.Unmarshal(raw, &rel); err != nil {
				t.Fatal(err)
			}
			edit4(&rel)
			return helm4Secret(t, &rel)
		}
		const forged = `{{ lookup "v1" "Secret" "kube-system" "admin" }}`
		tests := []struct {
			name   string
			secret *corev1.Secret
			what   string // "" when it decodes
		}{
			{"as verified", secret, ""},
			{"written again by Helm, superseded", rewrite(
				func(r *release.Release) { r.SetStatus(release.StatusSuperseded, "Upgrade complete") },
				func(r *releasev4.Release) { r.Info.Status = "superseded" }), ""},
			{"a template rewritten in place", rewrite(
				func(r *release.Release) { r.Chart.Templates[0].Data = []byte(forged) },
				func(r *releasev4.Release) { r.Chart.Templates[0].Data = []byte(forged) }), "chart and values"},
			{"values rewritten in place", rewrite(
				func(r *release.Release) { r.Config = map[string]any{"injected": true} },
				func(r *releasev4.Release) { r.Config = map[string]any{"injected": true} }), "chart and values"},
			{"manifest rewritten", rewrite(
				func(r *release.Release) { r.Manifest += "# more\n" },
				func(r *releasev4.Release) { r.Manifest += "# more\n" }), "manifest"},
		}
		for _, tt := range tests {
			t.Run(h.String()+"/"+tt.name, func(t *testing.T) {
				rel, err := Decode(tt.secret, "apps", "web", trusted)
				var untrusted *UntrustedError
				switch {
				case tt.what == "" && err != nil:
					t.Fatalf("Decode: %v", err)
				case tt.what == "" && rel.Helm != h:
					t.Errorf("decoded as written by %v", rel.Helm)
				case tt.what != "" && (!errors.As(err, &untrusted) || untrusted.What != tt.what || untrusted.Revision != 1):
					t.Errorf("Decode error = %v, want an UntrustedError of revision 1's %s", err, tt.what)
				}
			})
		}
		// A status an older locker wrote has no chart digest: nothing
		// says which chart was verified.
		noChart := trusted
		noChart.ChartDigest = ""
		if _, err := Decode(secret, "apps", "web", noChart); err == nil {
			t.Errorf("%v: a revision verified with no chart digest decoded", h)
		}
	}
}
