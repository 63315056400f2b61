package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestCLIOnARelease runs inspect and diff as a user types them, on a
// release of the real-chart corpus that a Warn-mode lock leaves drifted.
func TestCLIOnARelease(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	release := "cli-web"
	env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "webstack"), "-n", ns)
	cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, release, map[string]any{"mode": "Warn"})
	env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)

	// inspect decodes what Helm stored: the manifest as helm prints it,
	// and the whole release.
	res := env.CLI(t, "", "inspect", "release", release, "-n", ns, "-o", "manifest")
	if res.Code != 0 || res.Stdout != env.Helm(t, framework.Helm4, "get", "manifest", release, "-n", ns) {
		t.Errorf("inspect -o manifest: exit %d, stderr %s; stdout differs from helm get manifest:\n%s", res.Code, res.Stderr, res.Stdout)
	}
	res = env.CLI(t, "", "inspect", "release", release, "-n", ns, "-o", "json")
	var rel struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
		Chart struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"chart"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &rel); err != nil || res.Code != 0 || rel.Name != release || rel.Version != 1 || rel.Info.Status != "deployed" || rel.Chart.Metadata.Name != "webstack" {
		t.Errorf("inspect -o json: exit %d, %+v, %v\n%s", res.Code, rel, err, res.Stderr)
	}
	if res := env.CLI(t, "", "inspect", "release", release, "-n", ns, "--revision", "7"); res.Code == 0 || !strings.Contains(res.Stderr, "has no revision 7; it has 1") {
		t.Errorf("inspect of a missing revision: exit %d, stderr %s", res.Code, res.Stderr)
	}
	if res := env.CLI(t, "", "inspect", "release", "nothing", "-n", ns); res.Code == 0 || !strings.Contains(res.Stderr, "release "+ns+"/nothing not found") {
		t.Errorf("inspect of a missing release: exit %d, stderr %s", res.Code, res.Stderr)
	}

	// Just installed, with the quantities, empty maps and defaulted
	// fields of a real chart, nothing differs.
	if res := env.CLI(t, "", "diff", "helmrelease/"+cr); res.Code != 0 || res.Stdout != "" {
		t.Fatalf("diff of a release just installed: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), release+"-webstack", types.MergePatchType, []byte(`{"data":{"LOG_LEVEL":"debug"}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	waitForCondition(t, cr, v1alpha1.ConditionDrifted, metav1.ConditionTrue)
	res = env.CLI(t, "", "diff", "helmrelease/"+cr)
	headers := 0
	for line := range strings.Lines(res.Stdout) {
		if strings.HasPrefix(line, "# ") {
			headers++
		}
	}
	if res.Code != 1 || !strings.Contains(res.Stdout, "# ConfigMap "+ns+"/"+release+"-webstack: differs at /data/LOG_LEVEL; changed by kubectl-edit (Update)") ||
		!strings.Contains(res.Stdout, "-  LOG_LEVEL: debug") || headers != 1 || strings.Contains(res.Stdout, "\x1b[") {
		t.Errorf("diff of a drifted release: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if res := env.CLI(t, "", "diff", "helmrelease/nothing"); res.Code != 2 || !strings.Contains(res.Stderr, "reading HelmRelease "+framework.RegistrationNamespace+"/nothing") {
		t.Errorf("diff of a missing CR: exit %d, stderr %s", res.Code, res.Stderr)
	}
}

// TestCLIDiffFiles diffs plain YAML files, from a folder and from standard
// input.
func TestCLIDiffFiles(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  key: declared\n")
	write("b.json", `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "b"}}}`)
	write("notes.txt", "not a manifest")
	env.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(dir, "a.yaml"), "-f", filepath.Join(dir, "b.json"))

	if res := env.CLI(t, "", "diff", "-f", dir, "-n", ns); res.Code != 0 || res.Stdout != "" {
		t.Fatalf("diff of what was just applied: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	editStays(t, ns, "a", "edited", "no locker holds it")
	res := env.CLI(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: missing\n", "diff", "-f", dir, "-f", "-", "-n", ns)
	if res.Code != 1 || !strings.Contains(res.Stdout, "# ConfigMap "+ns+"/a: differs at /data/key; changed by kubectl-edit (Update)\n") ||
		!strings.Contains(res.Stdout, "# ConfigMap "+ns+"/missing: does not exist") || strings.Contains(res.Stdout, "Service") {
		t.Errorf("diff of drifted files: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	if res := env.CLI(t, "", "diff", "-f", filepath.Join(dir, "none.yaml")); res.Code != 2 || !strings.Contains(res.Stderr, "none.yaml") {
		t.Errorf("diff of a missing file: exit %d, stderr %s", res.Code, res.Stderr)
	}
	write("bad.yaml", "apiVersion: v1\nkind: ConfigMap\n")
	if res := env.CLI(t, "", "diff", "-f", filepath.Join(dir, "bad.yaml")); res.Code != 2 || !strings.Contains(res.Stderr, "bad.yaml: document 1: ConfigMap has no metadata.name") {
		t.Errorf("diff of a bad file: exit %d, stderr %s", res.Code, res.Stderr)
	}
}

// TestCLILock locks files with a ManifestLock as a user types it, sees the
// lock hold them, and diffs it.
func TestCLILock(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "web-app.yaml")
	if err := os.WriteFile(file, []byte(configMapYAML("web", "declared")+"---\n"+configMapYAML("db", "declared")), 0o644); err != nil {
		t.Fatal(err)
	}
	res := env.CLI(t, "", "lock", "-f", file, "-n", ns, "--name", "cli-"+ns)
	if res.Code != 0 || !strings.Contains(res.Stdout, "manifestlock "+framework.RegistrationNamespace+"/cli-"+ns+": 2 objects declared") ||
		!strings.Contains(res.Stdout, "state: Locked, 2 objects held, 2 created by the lock") || !strings.Contains(res.Stdout, "Locked=True") {
		t.Fatalf("lock: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	waitKey(t, ns, "web", "declared")
	setKey(t, ns, "web", "edited")
	waitKey(t, ns, "web", "declared")
	if res := env.CLI(t, "", "diff", "manifestlock/cli-"+ns); res.Code != 0 {
		t.Errorf("diff of a held ManifestLock: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}

	// Locked again from standard input with a changed value: the change
	// is applied. Then in Warn mode: an edit stays, and shows.
	second := configMapYAML("web", "second") + "---\n" + configMapYAML("db", "declared")
	res = env.CLI(t, second, "lock", "-f", "-", "-n", ns, "--name", "cli-"+ns)
	if res.Code != 0 || !strings.Contains(res.Stdout, "state: Locked") {
		t.Fatalf("lock again: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	waitKey(t, ns, "web", "second")
	res = env.CLI(t, second, "lock", "-f", "-", "-n", ns, "--name", "cli-"+ns, "--warn")
	if res.Code != 0 || !strings.Contains(res.Stdout, "state: Watching") {
		t.Fatalf("lock --warn: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	editStays(t, ns, "db", "edited", "Warn mode never writes")
	if res := env.CLI(t, "", "diff", "manifestlock/cli-"+ns); res.Code != 1 || !strings.Contains(res.Stdout, "# ConfigMap "+ns+"/db: differs at /data/key; changed by kubectl-edit (Update)") {
		t.Errorf("diff of a drifted ManifestLock: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	// -o json prints the ManifestLock itself, back to Enforce.
	res = env.CLI(t, "", "lock", "-f", file, "-n", ns, "--name", "cli-"+ns, "-o", "json")
	var printed mlv1.ManifestLock
	if err := json.Unmarshal([]byte(res.Stdout), &printed); err != nil || res.Code != 0 || printed.Kind != mlv1.Kind || printed.Status.State != mlv1.StateLocked || printed.Spec.Mode != "" {
		t.Errorf("lock -o json: exit %d, %v, %+v\nstdout:\n%s\nstderr:\n%s", res.Code, err, printed.Status, res.Stdout, res.Stderr)
	}
	if res := env.CLI(t, "", "lock", "-f", "-", "-n", ns); res.Code == 0 || !strings.Contains(res.Stderr, "--name") {
		t.Errorf("lock of standard input without a name: exit %d, stderr %s", res.Code, res.Stderr)
	}
}

// TestCLILockHelmTemplate locks the output of helm template, unchanged, of
// the real-chart corpus: CRDs with their custom resources, cluster-scoped
// RBAC, block scalars and quantities as charts write them. The first apply
// is no drift, and diff finds nothing.
func TestCLILockHelmTemplate(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	// --include-crds: the chart's crds/ folder, which Helm installs apart
	// from the manifest; without it the lock waits for the Gizmo kind and
	// says so.
	rendered := env.Helm(t, framework.Helm4, "template", "tmpl-"+ns[len(ns)-6:], framework.Chart(t, "webstack"), "-n", ns, "--include-crds")
	name := "tmpl-" + ns
	res := env.CLI(t, rendered, "lock", "-f", "-", "-n", ns, "--name", name, "--timeout", "60s")
	if res.Code != 0 || !strings.Contains(res.Stdout, "state: Locked") {
		t.Fatalf("lock of helm template output: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
	ml := getManifestLock(t, framework.RegistrationNamespace, name)
	// The chart's Gizmo CRD is shared with the other tests of the corpus:
	// if one installed it first, this lock adopted it rather than create
	// it. Every other object the lock created.
	adopted := ml.Status.LockedObjects - len(ml.Status.Inventory)
	for _, r := range ml.Status.Inventory {
		if r.Name == "gizmos.webstack.example.com" {
			adopted++
		}
	}
	if ml.Status.LockedObjects < 31 || adopted != 1 || ml.Status.DriftsDetected != 0 || len(ml.Status.NotLocked) != 0 {
		t.Errorf("status: %d objects locked, %d created, %d drifts (the last %+v), not locked %+v; want the whole chart created, no drift", ml.Status.LockedObjects, len(ml.Status.Inventory), ml.Status.DriftsDetected, ml.Status.LastDrift, ml.Status.NotLocked)
	}
	if res := env.CLI(t, "", "diff", "manifestlock/"+name); res.Code != 0 {
		t.Errorf("diff right after the lock: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestCLIKustomize: diff -k and lock -k build a Kustomize overlay as a
// ManifestLock's spec.sourceRef builds it, so a user sees what a lock of
// the same folder in Git would hold before creating it; a remote base is
// refused as the locker refuses it.
func TestCLIKustomize(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	dir := t.TempDir()
	writeFiles(t, dir, webOverlay(ns, 3, "prod", true))
	// A checkout: the overlay's base is above it, as in a repository.
	runIn(t, dir, time.Minute, "git", "init", "-q")
	overlay := filepath.Join(dir, "overlays", "prod")
	res := env.CLI(t, "", "diff", "-k", overlay)
	if res.Code != 1 || !strings.Contains(res.Stdout, "# Deployment "+ns+"/web: does not exist") || !strings.Contains(res.Stdout, "+  replicas: 3") {
		t.Fatalf("diff -k of an overlay not yet applied: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = env.CLI(t, "", "lock", "-k", overlay, "--name", "kustomized-"+ns, "--prune")
	if res.Code != 0 {
		t.Fatalf("lock -k: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if got := replicasOf(t, ns, "web"); got != 3 {
		t.Errorf("Deployment web has %d replicas, want the overlay's 3", got)
	}
	generatedConfigMap(t, ns)
	if res := env.CLI(t, "", "diff", "-k", overlay); res.Code != 0 {
		t.Errorf("diff -k of the overlay just locked: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}

	kust := filepath.Join(overlay, "kustomization.yaml")
	data, _ := os.ReadFile(kust)
	remote := strings.Replace(string(data), "- ../../base\n", "- ../../base\n- https://127.0.0.1:1/base.yaml\n", 1)
	if err := os.WriteFile(kust, []byte(remote), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := env.CLI(t, "", "diff", "-k", overlay); res.Code != 2 || !strings.Contains(res.Stderr, "https://127.0.0.1:1/base.yaml is remote") {
		t.Errorf("diff -k of an overlay with a remote base: exit %d\n%s%s; want it refused", res.Code, res.Stdout, res.Stderr)
	}
}
