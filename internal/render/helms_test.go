package render

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	actionv3 "helm.sh/helm/v3/pkg/action"
	loaderv3 "helm.sh/helm/v3/pkg/chart/loader"
	chartutilv3 "helm.sh/helm/v3/pkg/chartutil"
	releasev3 "helm.sh/helm/v3/pkg/release"
	actionv4 "helm.sh/helm/v4/pkg/action"
	commonv4 "helm.sh/helm/v4/pkg/chart/common"
	loaderv4 "helm.sh/helm/v4/pkg/chart/v2/loader"
	rcommonv4 "helm.sh/helm/v4/pkg/release/common"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/helm-locker/helm-locker/manifest"
)

// installedBy is the release Secret of `helm install web <dir> -n apps`
// as Helm h's own SDK renders it for a v1.36.3 cluster serving
// apiVersions, with values: its install action, client-only (as `helm
// template`, which renders what an install stores without a cluster),
// written by its own Secret driver as the install marks it deployed. It
// is built with h's loader, values code, engine and manifest sort, never
// with this package's.
func installedBy(t *testing.T, h manifest.Helm, dir string, values map[string]any) *corev1.Secret {
	t.Helper()
	if h == manifest.Helm3 {
		ch, err := loaderv3.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		install := actionv3.NewInstall(&actionv3.Configuration{Log: func(string, ...any) {}})
		install.DryRun, install.ClientOnly = true, true
		install.ReleaseName, install.Namespace = "web", "apps"
		install.KubeVersion = &chartutilv3.KubeVersion{Version: "v1.36.3", Major: "1", Minor: "36"}
		install.APIVersions = apiVersions
		rel, err := install.Run(ch, values)
		if err != nil {
			t.Fatal(err)
		}
		rel.SetStatus(releasev3.StatusDeployed, "Install complete")
		return helmSecret(t, rel)
	}
	ch, err := loaderv4.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	install := actionv4.NewInstall(actionv4.NewConfiguration(actionv4.ConfigurationSetLogger(slog.DiscardHandler)))
	install.DryRunStrategy = actionv4.DryRunClient
	install.ReleaseName, install.Namespace = "web", "apps"
	install.KubeVersion = &commonv4.KubeVersion{Version: "v1.36.3", Major: "1", Minor: "36"}
	install.APIVersions = commonv4.VersionSet(apiVersions)
	installed, err := install.Run(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := installed.(*releasev4.Release)
	if !ok {
		t.Fatalf("Helm 4's install returned a %T", installed)
	}
	if rel.ApplyMethod == "" {
		t.Fatal("Helm 4's install recorded no apply method")
	}
	rel.SetStatus(rcommonv4.StatusDeployed, "Install complete")
	return helm4Secret(t, rel)
}

// TestRenderAsTheHelmThatWroteIt renders revisions each Helm's SDK
// installed: a revision renders, byte for byte, as the Helm that wrote it
// stored it, and compares as unchanged. The charts are those Helm 3 and
// Helm 4 render or store differently, so that each case fails when a
// revision is rendered with the other Helm's code (checked below too):
// null-probe, jenkins-shaped, has a probe field set to null in values.yaml
// that a template writes with toYaml (Helm 3 renders `field: null`, Helm
// 4 leaves the field out); kept-blank-line, harbor-shaped, has a
// ConfigMap whose last value is a "|+" block scalar that ends in a blank
// line (Helm 3 trims it away as it stores the document, Helm 4 keeps it);
// dashboard's documents end in a line break, which Helm 4 keeps.
func TestRenderAsTheHelmThatWroteIt(t *testing.T) {
	tests := []struct {
		chart  string
		helm   manifest.Helm
		values map[string]any
		// stored is in the manifest Helm stored, lacking not: the
		// difference between the Helms that the case holds Render to.
		stored, lacking string
		// otherChanges says the other Helm's render compares as
		// changed, not only as other bytes: the objects differ as
		// Helm reads them. Helm 3 reads a "|+" block without the
		// blank line, whoever rendered it; line breaks between
		// documents never count.
		otherChanges bool
	}{
		{"null-probe", manifest.Helm3, nil, "            initialDelaySeconds: null\n", "", true},
		{"null-probe", manifest.Helm4, nil, "            timeoutSeconds: 5\n", "initialDelaySeconds", true},
		{"kept-blank-line", manifest.Helm3, nil, "    enablegzip = true\n---\n", "", false},
		{"kept-blank-line", manifest.Helm4, nil, "    enablegzip = true\n\n\n---\n", "", true},
		{"dashboard", manifest.Helm3, map[string]any{"adminPassword": "s3cret"}, "app.kubernetes.io/instance: web\n---\n", "", false},
		{"dashboard", manifest.Helm4, map[string]any{"adminPassword": "s3cret"}, "app.kubernetes.io/instance: web\n\n---\n", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.helm.String()+"/"+tt.chart, func(t *testing.T) {
			rel, err := DecodeUntrusted(installedBy(t, tt.helm, "testdata/"+tt.chart, tt.values), "apps", "web")
			if err != nil {
				t.Fatal(err)
			}
			if rel.Helm != tt.helm {
				t.Fatalf("Decode says %s wrote the revision", rel.Helm)
			}
			if !strings.Contains(rel.Manifest, tt.stored) || tt.lacking != "" && strings.Contains(rel.Manifest, tt.lacking) {
				t.Fatalf("%s stored\n%s\nwant it to hold %q and not %q", tt.helm, rel.Manifest, tt.stored, tt.lacking)
			}
			c, _ := fakeCluster()
			out, err := Render(context.Background(), rel, c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rel.Manifest, out.Manifest); diff != "" {
				t.Errorf("Render (-stored +rendered):\n%s", diff)
			}
			changes, err := Compare(rel.Helm, rel.Manifest, out.Manifest, out.Manifest)
			if err != nil || len(changes) != 0 {
				t.Errorf("Compare = %v, %v; want no change", changes, err)
			}

			// Rendered with the other Helm's code, the same revision
			// reads as changed: the case tells the Helms apart.
			other := otherHelm(t, rel)
			wrong, err := Render(context.Background(), other, c)
			if err != nil {
				t.Fatal(err)
			}
			if wrong.Manifest == rel.Manifest {
				t.Fatalf("%s renders what %s stored: the case does not tell the Helms apart", other.Helm, rel.Helm)
			}
			if changes, err := Compare(rel.Helm, rel.Manifest, wrong.Manifest, wrong.Manifest); err != nil || (len(changes) > 0) != tt.otherChanges {
				t.Errorf("rendered by %s, Compare = %v, %v; want changes: %t", other.Helm, changes, err, tt.otherChanges)
			}
		})
	}
}

// otherHelm is rel as the other Helm would decode and render it.
func otherHelm(t *testing.T, rel *Release) *Release {
	t.Helper()
	v3, err := rel.AsHelm3()
	if err != nil {
		t.Fatal(err)
	}
	if rel.Helm == manifest.Helm3 {
		return as(t, manifest.Helm4, v3)
	}
	return fromHelm3(v3)
}
