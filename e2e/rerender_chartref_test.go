package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// webappRelease installs the webapp chart (a library dependency, and a
// cache subchart that looks up ConfigMap cache-settings) as release "app"
// in a new namespace with the helm CLI v, beside a ServiceAccount
// "writer" bound to edit there, and cache-settings saying maxmemory. It
// returns the namespace.
func webappRelease(t *testing.T, v framework.HelmVersion, maxMemory string, args ...string) string {
	t.Helper()
	ns := env.Namespace(t)
	env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--clusterrole=edit", "--serviceaccount="+ns+":writer")
	setMaxMemory(t, ns, maxMemory)
	env.Helm(t, v, append([]string{"install", "app", framework.Chart(t, "webapp"), "-n", ns}, args...)...)
	return ns
}

// setMaxMemory writes data.maxmemory of ConfigMap ns/cache-settings,
// which the webapp chart's cache subchart looks up.
func setMaxMemory(t *testing.T, ns, maxMemory string) {
	t.Helper()
	patch := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cache-settings"},"data":{"maxmemory":%q}}`, maxMemory)
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), "cache-settings", types.ApplyPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "e2e-settings", Force: new(true)}); err != nil {
		t.Fatal(err)
	}
}

// chartFiles are the files of the chart folder dir, by slash-separated
// path under prefix, as an artifact holds them.
func chartFiles(t *testing.T, dir, prefix string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[prefix+filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// packageChart is `helm package` of the chart folder dir by Helm v: the
// chart archive Flux's HelmChart and OCI artifacts carry.
func packageChart(t *testing.T, v framework.HelmVersion, dir string) []byte {
	t.Helper()
	out := t.TempDir()
	env.Helm(t, v, "package", dir, "-d", out)
	matches, _ := filepath.Glob(filepath.Join(out, "*.tgz"))
	if len(matches) != 1 {
		t.Fatalf("helm package wrote %v", matches)
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// serve serves data at name, as source-controller's storage serves an
// artifact, and returns its URL and digest.
func (s *artifactServer) serve(name string, data []byte) (url, digest string) {
	s.mu.Lock()
	s.served["/"+name] = data
	s.mu.Unlock()
	sum := sha256.Sum256(data)
	return s.URL + "/" + name, "sha256:" + hex.EncodeToString(sum[:])
}

// setChartRef sets the CR's spec.chartRef.
func setChartRef(t *testing.T, cr, kind, name, namespace string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"chartRef":{"kind":%q,"name":%q,"namespace":%q}}}`, kind, name, namespace)
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(framework.RegistrationNamespace).Patch(t.Context(), cr, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRerenderChartRef: Helm stores a release's chart without its
// dependencies, so the webapp chart (built on a library chart, with a
// subchart that looks up a ConfigMap), installed with each Helm CLI and
// locked with rerender Report, cannot be rendered from its release:
// RenderFailed, naming the library. With spec.chartRef naming the chart
// as an ExternalArtifact serves it (packaged by `helm package`, as
// source-controller's HelmChart artifacts are) it renders as stored,
// subchart and all: Rendered=True, the subchart's lookup among the
// lookups, the artifact's revision in status.rerender.chartRevision. A
// change of the subchart's lookup target is reported, with the
// subchart's object and path, and `helm-locker diff --rerender` shows it
// too, from the same source. A new artifact revision whose chart differs
// from the stored one in a template says ChartMismatch, naming the
// template, and renders nothing. Then Flux's real source-controller pulls
// the chart from an OCI registry on loopback, where the helm CLI pushed
// it, and fetches it from a chart repository served on loopback, and the
// lock renders it from the OCIRepository's artifact and the HelmChart's. In
// Upgrade mode, a change of the subchart's lookup target upgrades the
// release with the source's chart, which Helm's stored chart could not
// render, and the new revision renders as stored.
func TestRerenderChartRef(t *testing.T) {
	t.Parallel()
	installFluxCRDs(t)
	server := newArtifactServer(t)
	for _, v := range framework.HelmVersions {
		t.Run(v.String()+"/ExternalArtifact", func(t *testing.T) {
			t.Parallel()
			ns := webappRelease(t, v, "64mb")
			cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": "Report"})
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			waitRendered(t, cr, 60*time.Second, metav1.ConditionFalse, v1alpha1.ReasonRenderFailed, "common")

			url, digest := server.serve(ns+"/webapp-1.4.2.tgz", packageChart(t, v, framework.Chart(t, "webapp")))
			createExternalArtifact(t, ns, "webapp")
			revision := "1.4.2@" + digest
			setArtifact(t, ns, "webapp", url, digest, revision)
			setChartRef(t, cr, "ExternalArtifact", "webapp", ns)
			hr := waitRendered(t, cr, 60*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			if got := hr.Status.Rerender; got.ChartRevision != revision || !slices.Contains(got.Lookups, "ConfigMap "+ns+"/cache-settings") {
				t.Errorf("status.rerender = %+v, want chartRevision %s and the subchart's lookup of ConfigMap %s/cache-settings", got, revision, ns)
			}

			// The subchart's lookup target changes.
			setMaxMemory(t, ns, "256mb")
			hr = waitRendered(t, cr, 60*time.Second, metav1.ConditionFalse, v1alpha1.ReasonClusterChanged, "lookup of ConfigMap "+ns+"/cache-settings changed")
			if paths := changedPaths(hr, "ConfigMap "+ns+"/app-cache"); !slices.Contains(paths, "/data/cache.conf") {
				t.Errorf("status.rerender.changes = %+v, want ConfigMap %s/app-cache at /data/cache.conf", hr.Status.Rerender.Changes, ns)
			}
			if got := env.Get(t, "v1", "configmaps", ns, "app-cache"); !strings.Contains(fmt.Sprint(got.Object["data"]), "maxmemory 64mb") {
				t.Errorf("Report mode changed the subchart's ConfigMap: %v", got.Object["data"])
			}
			// The CLI renders what the lock renders, from the source.
			res := env.CLI(t, "", "diff", "--rerender", "-n", ns, "app")
			if res.Code != 1 || !strings.Contains(res.Stdout, "ConfigMap "+ns+"/app-cache") || !strings.Contains(res.Stdout, "+    maxmemory 256mb") {
				t.Errorf("helm-locker diff --rerender exited %d:\n%s\n%s\nwant the subchart's ConfigMap with maxmemory 256mb", res.Code, res.Stdout, res.Stderr)
			}

			// A new revision of the source whose chart is not the
			// stored one.
			files := chartFiles(t, framework.Chart(t, "webapp"), "webapp/")
			files["webapp/templates/service.yaml"] = strings.Replace(files["webapp/templates/service.yaml"], "targetPort: http", "targetPort: 8080", 1)
			url, digest = server.publish(t, ns+"/webapp-1.4.2-edited.tar.gz", files)
			setArtifact(t, ns, "webapp", url, digest, "1.4.2@"+digest)
			hr = waitRendered(t, cr, 60*time.Second, metav1.ConditionFalse, v1alpha1.ReasonChartMismatch, "templates/service.yaml differs", "nothing was rendered")
			if got := hr.Status.Rerender; got.ChartRevision != "1.4.2@"+digest {
				t.Errorf("status.rerender = %+v, want chartRevision 1.4.2@%s", got, digest)
			}
		})
	}
	for _, v := range framework.HelmVersions {
		t.Run(v.String()+"/Upgrade", func(t *testing.T) {
			t.Parallel()
			ns := webappRelease(t, v, "64mb", "--set", "replicaCount=2")
			url, digest := server.serve(ns+"/webapp-1.4.2.tgz", packageChart(t, v, framework.Chart(t, "webapp")))
			createExternalArtifact(t, ns, "webapp")
			setArtifact(t, ns, "webapp", url, digest, "1.4.2@"+digest)
			cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": "Upgrade",
				"chartRef": map[string]any{"kind": "ExternalArtifact", "name": "webapp", "namespace": ns}})
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			waitRendered(t, cr, 60*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)

			// The subchart's lookup target changes: the locker
			// upgrades with the chart from its source, library and
			// subchart included, and the new revision renders as
			// stored, its reused values and all.
			setMaxMemory(t, ns, "256mb")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			waitRendered(t, cr, 60*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			if got := env.Get(t, "v1", "configmaps", ns, "app-cache"); !strings.Contains(fmt.Sprint(got.Object["data"]), "maxmemory 256mb") {
				t.Errorf("after the upgrade, the subchart's ConfigMap says %v", got.Object["data"])
			}
			if got := replicasOf(t, ns, "app-webapp"); got != 2 {
				t.Errorf("after the upgrade, Deployment app-webapp has %d replicas, want the user's 2", got)
			}
			history := env.Helm(t, v, "history", "app", "-n", ns, "-o", "json")
			if !strings.Contains(history, `"revision":2`) || !strings.Contains(history, `"status":"deployed"`) {
				t.Errorf("helm history after the locker's upgrade:\n%s", history)
			}
		})
	}
	t.Run("source-controller", func(t *testing.T) {
		t.Parallel()
		const shard = "chartref"
		env.StartSourceController(t, shard)
		// lockFrom creates src, labelled for this test's
		// source-controller, and a lock of release "app" in ns whose
		// chartRef names it, and waits for the chart to render as
		// stored, the subchart's lookup among the lookups.
		lockFrom := func(t *testing.T, ns, resource string, src *unstructured.Unstructured, revision string) {
			t.Helper()
			src.SetNamespace(ns)
			src.SetLabels(map[string]string{framework.ShardLabel: shard})
			if _, err := env.Dynamic.Resource(externalArtifacts.GroupVersion().WithResource(resource)).Namespace(ns).Create(t.Context(), src, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, "app", map[string]any{"serviceAccountName": "writer", "rerender": "Report",
				"chartRef": map[string]any{"kind": src.GetKind(), "name": src.GetName(), "namespace": ns}})
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			hr := waitRendered(t, cr, 90*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			if got := hr.Status.Rerender; !strings.HasPrefix(got.ChartRevision, revision) || !slices.Contains(got.Lookups, "ConfigMap "+ns+"/cache-settings") {
				t.Errorf("status.rerender = %+v, want chartRevision %s... and the subchart's lookup", got, revision)
			}
		}
		t.Run("OCIRepository", func(t *testing.T) {
			t.Parallel()
			reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
			t.Cleanup(reg.Close)
			host := strings.TrimPrefix(reg.URL, "http://")
			v := framework.Helm4
			ns := webappRelease(t, v, "64mb")
			packaged := filepath.Join(t.TempDir(), "webapp-1.4.2.tgz")
			if err := os.WriteFile(packaged, packageChart(t, v, framework.Chart(t, "webapp")), 0o644); err != nil {
				t.Fatal(err)
			}
			env.Helm(t, v, "push", packaged, "oci://"+host+"/charts", "--plain-http")
			lockFrom(t, ns, "ocirepositories", &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": mlv1.SourceGroup + "/v1", "kind": "OCIRepository", "metadata": map[string]any{"name": "webapp"},
				"spec": map[string]any{"url": "oci://" + host + "/charts/webapp", "interval": "1m", "insecure": true,
					"ref":           map[string]any{"tag": "1.4.2"},
					"layerSelector": map[string]any{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "operation": "copy"}},
			}}, "1.4.2@sha256:")
		})
		t.Run("HelmChart", func(t *testing.T) {
			t.Parallel()
			// A chart repository, as `helm repo index` lays one out,
			// served on loopback.
			v := framework.Helm3
			ns := webappRelease(t, v, "64mb")
			dir := t.TempDir()
			packaged := packageChart(t, v, framework.Chart(t, "webapp"))
			if err := os.WriteFile(filepath.Join(dir, "webapp-1.4.2.tgz"), packaged, 0o644); err != nil {
				t.Fatal(err)
			}
			repoURL := server.URL + "/" + ns
			env.Helm(t, v, "repo", "index", dir, "--url", repoURL)
			index, err := os.ReadFile(filepath.Join(dir, "index.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			server.serve(ns+"/index.yaml", index)
			server.serve(ns+"/webapp-1.4.2.tgz", packaged)
			repo := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": mlv1.SourceGroup + "/v1", "kind": "HelmRepository",
				"metadata": map[string]any{"name": "charts", "namespace": ns, "labels": map[string]any{framework.ShardLabel: shard}},
				"spec":     map[string]any{"url": repoURL, "interval": "1m"},
			}}
			if _, err := env.Dynamic.Resource(externalArtifacts.GroupVersion().WithResource("helmrepositories")).Namespace(ns).Create(t.Context(), repo, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			lockFrom(t, ns, "helmcharts", &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": mlv1.SourceGroup + "/v1", "kind": "HelmChart", "metadata": map[string]any{"name": "webapp"},
				"spec": map[string]any{"chart": "webapp", "version": "1.4.2", "interval": "1m",
					"sourceRef": map[string]any{"kind": "HelmRepository", "name": "charts"}},
			}}, "1.4.2")
		})
	})
}

// createExternalArtifact creates ExternalArtifact ns/name, with no
// artifact yet.
func createExternalArtifact(t *testing.T, ns, name string) {
	t.Helper()
	ea := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": externalArtifacts.GroupVersion().String(), "kind": "ExternalArtifact",
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
	if _, err := env.Dynamic.Resource(externalArtifacts).Namespace(ns).Create(t.Context(), ea, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
