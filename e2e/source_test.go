package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

var externalArtifacts = schema.GroupVersionResource{Group: mlv1.SourceGroup, Version: "v1", Resource: "externalartifacts"}

// artifactServer serves tar.gz artifacts, as source-controller's storage
// does, and counts what was asked of it.
type artifactServer struct {
	*httptest.Server
	mu       sync.Mutex
	served   map[string][]byte
	requests atomic.Int32
}

func newArtifactServer(t *testing.T) *artifactServer {
	s := &artifactServer{served: map[string][]byte{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		data, ok := s.served[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(s.Close)
	return s
}

// publish serves files as the tar.gz at name, and returns its URL and
// digest.
func (s *artifactServer) publish(t *testing.T, name string, files map[string]string) (url, digest string) {
	t.Helper()
	return s.publishTar(t, name, files)
}

// publishTar is publish with more entries after the files, such as links.
func (s *artifactServer) publishTar(t *testing.T, name string, files map[string]string, more ...*tar.Header) (url, digest string) {
	t.Helper()
	data := tarGz(t, files, more...)
	s.mu.Lock()
	s.served["/"+name] = data
	s.mu.Unlock()
	sum := sha256.Sum256(data)
	return s.URL + "/" + name, "sha256:" + hex.EncodeToString(sum[:])
}

// tarGz is files as a tar.gz, in path order, and then the entries more.
func tarGz(t *testing.T, files map[string]string, more ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(files[p])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[p])); err != nil {
			t.Fatal(err)
		}
	}
	for _, hdr := range more {
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeFiles writes files under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// installFluxCRDs installs Flux source-controller's own CRDs, from the
// module at the version e2e/tools/flux/go.mod requires.
func installFluxCRDs(t *testing.T) {
	t.Helper()
	dir, err := controlplane.FluxCRDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	env.Kubectl(t, "apply", "--server-side", "-f", dir)
	env.Kubectl(t, "wait", "--for=condition=Established", "crd/externalartifacts.source.toolkit.fluxcd.io", "crd/gitrepositories.source.toolkit.fluxcd.io", "--timeout=60s")
}

// setArtifact writes an ExternalArtifact's status.artifact, as whatever
// publishes it does.
func setArtifact(t *testing.T, ns, name, url, digest, revision string) {
	t.Helper()
	client := env.Dynamic.Resource(externalArtifacts).Namespace(ns)
	ea, err := client.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedMap(ea.Object, map[string]any{
		"url": url, "digest": digest, "revision": revision, "path": "externalartifact/" + name + ".tar.gz",
		"lastUpdateTime": time.Now().UTC().Format(time.RFC3339),
	}, "status", "artifact")
	if _, err := client.UpdateStatus(t.Context(), ea, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing the status of ExternalArtifact %s/%s: %v", ns, name, err)
	}
}

// webOverlay is a Kustomize base (a Deployment, a Service and a
// ConfigMap) with an overlay that patches replicas, generates a ConfigMap
// and puts everything in ns, as such repositories are laid out.
func webOverlay(ns string, replicas int, mode string, service bool) map[string]string {
	resources := "- deployment.yaml\n- config.yaml\n"
	if service {
		resources += "- service.yaml\n"
	}
	return map[string]string{
		"base/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + resources,
		"base/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        resources:
          requests: {cpu: "0.1", memory: 64Mi}
        envFrom:
        - configMapRef: {name: web-env}
`,
		"base/service.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n  - port: 80\n    targetPort: 8080\n",
		"base/config.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\ndata:\n  greeting: hello\n",
		"overlays/prod/kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
resources:
- ../../base
patches:
- path: replicas.yaml
configMapGenerator:
- name: web-env
  literals: [MODE=%s]
`, ns, mode),
		"overlays/prod/replicas.yaml": fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: %d\n", replicas),
	}
}

// TestManifestLockWaitsForFluxSourceKinds: a tenant's ManifestLock that
// names an ExternalArtifact before Flux's CRDs exist says SourceNotServed,
// and reads its source once they are installed. It is not parallel, so it
// runs before every parallel test: those install Flux's CRDs, and once one
// has, the cluster serves the kinds for all (TestRerenderChartRef once
// installed them before this lock's first sync, and the lock rightly said
// the source did not exist).
func TestManifestLockWaitsForFluxSourceKinds(t *testing.T) {
	ns := editTenant(t)
	createManifestLock(t, ns, "early", map[string]any{
		"sourceRef": map[string]any{"kind": "ExternalArtifact", "name": "early"}, "path": ".",
	})
	waitSourceCondition(t, ns, "early", mlv1.ReasonSourceNotServed, "ExternalArtifact "+ns+"/early")
	installFluxCRDs(t)
	waitSourceCondition(t, ns, "early", mlv1.ReasonSourceNotReady, "ExternalArtifact "+ns+"/early does not exist")
}

// TestManifestLockFromFluxSources: a tenant's ManifestLock names an
// ExternalArtifact in its namespace, whose artifact is a Kustomize
// overlay served over HTTP, as Flux's source-controller serves one.
// It holds what `kustomize build` makes, reverts
// an edit, applies and holds each new revision (status.lastAppliedRevision
// names it), and prunes what a revision drops, the generated ConfigMap of
// the old hash included. An artifact whose digest does not match, or
// whose overlay names a remote base, is refused with its reason, nothing
// fetched from the remote, the last revision still held; a tenant's lock
// naming another namespace's source is Forbidden. Then Flux's real
// source-controller (built by hack/tools.sh) fetches a Git repository
// an OCI artifact and an S3 bucket, each served on loopback, and locks of
// each hold what they build.
func TestManifestLockFromFluxSources(t *testing.T) {
	t.Parallel()
	ns := editTenant(t)
	server := newArtifactServer(t)

	installFluxCRDs(t)
	createManifestLock(t, ns, "web", map[string]any{
		"sourceRef": map[string]any{"kind": "ExternalArtifact", "name": "web"}, "path": "./overlays/prod", "prune": true,
	})
	ea := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": externalArtifacts.GroupVersion().String(), "kind": "ExternalArtifact",
		"metadata": map[string]any{"name": "web", "namespace": ns},
	}}
	if _, err := env.Dynamic.Resource(externalArtifacts).Namespace(ns).Create(t.Context(), ea, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSourceCondition(t, ns, "web", mlv1.ReasonSourceNotReady, "has no artifact yet")

	url, digest := server.publish(t, "rev1.tar.gz", webOverlay(ns, 3, "prod", true))
	setArtifact(t, ns, "web", url, digest, "main@sha1:1111")
	ml := waitRevision(t, ns, "web", "main@sha1:1111")
	firstEnv := generatedConfigMap(t, ns)
	if got := replicasOf(t, ns, "web"); got != 3 {
		t.Errorf("Deployment web has %d replicas, want the overlay's 3", got)
	}
	if env.Get(t, "v1", "services", ns, "web") == nil || env.Get(t, "v1", "configmaps", ns, "web-config") == nil {
		t.Error("the base's Service or ConfigMap was not created")
	}
	if ml.Status.LastAttemptedRevision != "main@sha1:1111" {
		t.Errorf("status.lastAttemptedRevision = %q", ml.Status.LastAttemptedRevision)
	}

	env.Kubectl(t, "-n", ns, "scale", "deployment", "web", "--replicas=7")
	waitReplicas(t, ns, "web", 3)

	// A new revision: other replicas, another generated ConfigMap, and no
	// Service.
	url, digest = server.publish(t, "rev2.tar.gz", webOverlay(ns, 2, "canary", false))
	setArtifact(t, ns, "web", url, digest, "main@sha1:2222")
	waitRevision(t, ns, "web", "main@sha1:2222")
	waitReplicas(t, ns, "web", 2)
	env.Eventually(t, 30*time.Second, func() error {
		if env.Get(t, "v1", "services", ns, "web") != nil {
			return fmt.Errorf("Service %s/web, which revision 2 drops, was not pruned", ns)
		}
		if env.Get(t, "v1", "configmaps", ns, firstEnv) != nil {
			return fmt.Errorf("ConfigMap %s/%s, revision 1's generated one, was not pruned", ns, firstEnv)
		}
		return nil
	})
	if second := generatedConfigMap(t, ns); second == firstEnv {
		t.Errorf("revision 2's generated ConfigMap has revision 1's name %s", second)
	}

	// Refused revisions: revision 2 stays held.
	before := server.requests.Load()
	url, _ = server.publish(t, "rev3.tar.gz", webOverlay(ns, 5, "prod", true))
	setArtifact(t, ns, "web", url, "sha256:"+strings.Repeat("0", 64), "main@sha1:3333")
	waitSourceCondition(t, ns, "web", mlv1.ReasonArtifactDigestMismatch, "main@sha1:3333")
	remote := webOverlay(ns, 5, "prod", true)
	remote["overlays/prod/kustomization.yaml"] = strings.Replace(remote["overlays/prod/kustomization.yaml"], "resources:\n- ../../base\n", "resources:\n- ../../base\n- "+server.URL+"/remote/base.yaml\n", 1)
	url, digest = server.publish(t, "rev4.tar.gz", remote)
	setArtifact(t, ns, "web", url, digest, "main@sha1:4444")
	ml = waitSourceCondition(t, ns, "web", mlv1.ReasonBuildFailed, server.URL+"/remote/base.yaml is remote")
	if ml.Status.LastAppliedRevision != "main@sha1:2222" || ml.Status.LastAttemptedRevision != "main@sha1:4444" {
		t.Errorf("revisions applied %q, attempted %q; want main@sha1:2222 still held, main@sha1:4444 tried", ml.Status.LastAppliedRevision, ml.Status.LastAttemptedRevision)
	}
	// One download of each refused revision, however often the lock
	// syncs, and nothing of the remote base.
	if got := server.requests.Load() - before; got != 2 {
		t.Errorf("the server saw %d requests for the two refused artifacts, want one each, and none for the remote base", got)
	}
	// Past the locker's caps, with a symlink, or with an exec plugin:
	// refused the same way.
	big := webOverlay(ns, 5, "prod", true)
	for i := range framework.SharedArtifactMaxFiles {
		big[fmt.Sprintf("docs/page-%03d.md", i)] = "notes"
	}
	url, digest = server.publish(t, "rev5.tar.gz", big)
	setArtifact(t, ns, "web", url, digest, "main@sha1:5555")
	waitSourceCondition(t, ns, "web", mlv1.ReasonArtifactTooLarge, fmt.Sprintf("main@sha1:5555: more than %d files", framework.SharedArtifactMaxFiles))
	url, digest = server.publishTar(t, "rev6.tar.gz", webOverlay(ns, 5, "prod", true), &tar.Header{Name: "overlays/prod/secrets.yaml", Typeflag: tar.TypeSymlink, Linkname: "/var/run/secrets/kubernetes.io/serviceaccount/token"})
	setArtifact(t, ns, "web", url, digest, "main@sha1:6666")
	waitSourceCondition(t, ns, "web", mlv1.ReasonUnsafeArtifact, "overlays/prod/secrets.yaml is a link to /var/run/secrets")
	plugin := webOverlay(ns, 5, "prod", true)
	plugin["overlays/prod/kustomization.yaml"] += "transformers:\n- |\n  apiVersion: example.com/v1\n  kind: Exec\n  metadata:\n    name: x\n    annotations:\n      config.kubernetes.io/function: |\n        exec:\n          path: /bin/sh\n"
	url, digest = server.publish(t, "rev7.tar.gz", plugin)
	setArtifact(t, ns, "web", url, digest, "main@sha1:7777")
	waitSourceCondition(t, ns, "web", mlv1.ReasonBuildFailed, "external plugins disabled")
	env.Kubectl(t, "-n", ns, "scale", "deployment", "web", "--replicas=9")
	waitReplicas(t, ns, "web", 2)
	if ml := getManifestLock(t, ns, "web"); ml.Status.LastAppliedRevision != "main@sha1:2222" {
		t.Errorf("after refused revisions, status.lastAppliedRevision = %q, want main@sha1:2222 still held", ml.Status.LastAppliedRevision)
	}

	// A tenant's lock may not name another namespace's source.
	other := env.Namespace(t)
	optIn(t, other, "default", "borrow")
	createManifestLock(t, other, "borrow", map[string]any{"sourceRef": map[string]any{"kind": "ExternalArtifact", "name": "web", "namespace": ns}})
	waitSourceCondition(t, other, "borrow", mlv1.ReasonForbidden, "may name a source only in its own namespace")

	// Flux's CRDs are installed now: the real source-controller fetches
	// from a Git server and an OCI registry, each on loopback.
	env.StartSourceController(t, "")
	t.Run("GitRepository", testLockFromGit)
	t.Run("OCIRepository", testLockFromOCI)
	t.Run("Bucket", testLockFromBucket)
}

// testLockFromBucket: a lock of an overlay kept in an S3 bucket (an
// in-process S3 server, gofakes3, on loopback) that source-controller
// reads with its generic provider.
func testLockFromBucket(t *testing.T) {
	ns := editTenant(t)
	backend := s3mem.New()
	if err := backend.CreateBucket("platform"); err != nil {
		t.Fatal(err)
	}
	s3 := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(s3.Close)
	// Uploaded over S3's API, as a user's tool would (the server then
	// records Last-Modified, which source-controller's client needs).
	for p, body := range webOverlay(ns, 3, "prod", true) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, s3.URL+"/platform/"+p, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s3.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %s to the S3 server: %s", p, resp.Status)
		}
	}
	env.Kubectl(t, "-n", ns, "create", "secret", "generic", "s3", "--from-literal=accesskey=e2e", "--from-literal=secretkey=e2e-secret")
	src := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SourceGroup + "/v1", "kind": "Bucket",
		"metadata": map[string]any{"name": "platform", "namespace": ns},
		"spec": map[string]any{"provider": "generic", "bucketName": "platform", "endpoint": strings.TrimPrefix(s3.URL, "http://"),
			"insecure": true, "interval": "1m", "secretRef": map[string]any{"name": "s3"}},
	}}
	lockOverlay(t, src, "buckets", "overlays/prod")
	env.Eventually(t, 60*time.Second, func() error {
		ml := getManifestLock(t, ns, "web")
		if ml.Status.State != mlv1.StateLocked || !strings.HasPrefix(ml.Status.LastAppliedRevision, "sha256:") {
			return fmt.Errorf("ManifestLock %s/web is %s at revision %q, want Locked at the bucket's sha256: %+v", ns, ml.Status.State, ml.Status.LastAppliedRevision, ml.Status.Conditions)
		}
		return nil
	})
	holdsOverlay(t, ns)
}

// editTenant is a tenant's namespace whose default ServiceAccount may
// edit it and write for the lock "web".
func editTenant(t *testing.T) string {
	t.Helper()
	ns := env.Namespace(t)
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "default-edit", "--clusterrole=edit", "--serviceaccount="+ns+":default")
	optIn(t, ns, "default", "web")
	return ns
}

// lockOverlay creates src, a Flux source of resource, and the lock "web"
// of the folder path of its artifact, beside it.
func lockOverlay(t *testing.T, src *unstructured.Unstructured, resource, path string) {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: mlv1.SourceGroup, Version: "v1", Resource: resource}
	if _, err := env.Dynamic.Resource(gvr).Namespace(src.GetNamespace()).Create(t.Context(), src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createManifestLock(t, src.GetNamespace(), "web", map[string]any{
		"sourceRef": map[string]any{"kind": src.GetKind(), "name": src.GetName()}, "path": path, "prune": true,
	})
}

// holdsOverlay checks the overlay's Deployment is as built, three
// replicas, and that an edit of it is reverted.
func holdsOverlay(t *testing.T, ns string) {
	t.Helper()
	if got := replicasOf(t, ns, "web"); got != 3 {
		t.Errorf("Deployment web has %d replicas, want the overlay's 3", got)
	}
	env.Kubectl(t, "-n", ns, "scale", "deployment", "web", "--replicas=7")
	waitReplicas(t, ns, "web", 3)
}

// testLockFromGit: a tenant's lock of an overlay in a Git repository
// that source-controller fetches from a Git server on loopback holds each
// commit as it is pushed.
func testLockFromGit(t *testing.T) {
	ns := editTenant(t)
	srv, err := gittestserver.NewTempGitServer()
	if err != nil {
		t.Fatal(err)
	}
	srv.AutoCreate()
	if err := srv.StartHTTP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.StopHTTP(); _ = os.RemoveAll(srv.Root()) })
	remote := srv.HTTPAddress() + "/platform.git"

	work := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(runIn(t, work, time.Minute, "git", append([]string{"-c", "user.name=e2e", "-c", "user.email=e2e@example.com"}, args...)...))
	}
	commit := func(files map[string]string, message string) string {
		t.Helper()
		_ = os.RemoveAll(filepath.Join(work, "base"))
		_ = os.RemoveAll(filepath.Join(work, "overlays"))
		writeFiles(t, work, files)
		git("add", "-A")
		git("commit", "-q", "-m", message)
		git("push", "-q", remote, "main")
		return git("rev-parse", "HEAD")
	}
	git("init", "-q", "-b", "main")
	first := commit(webOverlay(ns, 3, "prod", true), "web: three replicas")

	repo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SourceGroup + "/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": "platform", "namespace": ns},
		"spec":     map[string]any{"url": remote, "interval": "1m", "ref": map[string]any{"branch": "main"}},
	}}
	lockOverlay(t, repo, "gitrepositories", "overlays/prod")
	waitRevision(t, ns, "web", "main@sha1:"+first)
	holdsOverlay(t, ns)

	second := commit(webOverlay(ns, 2, "canary", false), "web: two replicas, no Service")
	// As `flux reconcile source git` asks for a fetch now.
	env.Kubectl(t, "-n", ns, "annotate", "--overwrite", "gitrepository", "platform", "reconcile.fluxcd.io/requestedAt="+time.Now().Format(time.RFC3339Nano))
	waitRevision(t, ns, "web", "main@sha1:"+second)
	waitReplicas(t, ns, "web", 2)
	env.Eventually(t, 30*time.Second, func() error {
		if env.Get(t, "v1", "services", ns, "web") != nil {
			return fmt.Errorf("Service %s/web, which the second commit drops, was not pruned", ns)
		}
		return nil
	})
}

// Flux's OCI artifact media types (fluxcd/pkg/oci): what `flux push
// artifact` pushes and OCIRepository pulls.
const (
	fluxConfigType  = "application/vnd.cncf.flux.config.v1+json"
	fluxContentType = "application/vnd.cncf.flux.content.v1.tar+gzip"
)

// testLockFromOCI: a lock of an overlay pushed as an OCI artifact to a
// registry on loopback, which source-controller pulls.
func testLockFromOCI(t *testing.T) {
	ns := editTenant(t)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	repo := strings.TrimPrefix(reg.URL, "http://") + "/apps/web"
	push := func(files map[string]string) string {
		t.Helper()
		layer := static.NewLayer(tarGz(t, files), fluxContentType)
		img, err := mutate.Append(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), fluxConfigType), mutate.Addendum{Layer: layer})
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(repo+":latest", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d.String()
	}
	digest := push(webOverlay(ns, 3, "prod", true))
	src := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SourceGroup + "/v1", "kind": "OCIRepository",
		"metadata": map[string]any{"name": "web", "namespace": ns},
		"spec":     map[string]any{"url": "oci://" + repo, "interval": "1m", "insecure": true, "ref": map[string]any{"tag": "latest"}},
	}}
	lockOverlay(t, src, "ocirepositories", "./overlays/prod")
	waitRevision(t, ns, "web", "latest@"+digest)
	holdsOverlay(t, ns)
}

// waitSourceCondition waits until the lock's Ready condition is False with
// reason, its message saying says.
func waitSourceCondition(t *testing.T, ns, name, reason, says string) *mlv1.ManifestLock {
	t.Helper()
	var ml *mlv1.ManifestLock
	env.Eventually(t, 60*time.Second, func() error {
		ml = getManifestLock(t, ns, name)
		for _, c := range ml.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady && c.Status == "False" && c.Reason == reason && strings.Contains(c.Message, says) {
				return nil
			}
		}
		return fmt.Errorf("ManifestLock %s/%s conditions %+v, want Ready=False %s saying %q", ns, name, ml.Status.Conditions, reason, says)
	})
	return ml
}

// waitRevision waits until the lock holds revision, Locked.
func waitRevision(t *testing.T, ns, name, revision string) *mlv1.ManifestLock {
	t.Helper()
	var ml *mlv1.ManifestLock
	env.Eventually(t, 60*time.Second, func() error {
		ml = getManifestLock(t, ns, name)
		if ml.Status.State != mlv1.StateLocked || ml.Status.LastAppliedRevision != revision {
			return fmt.Errorf("ManifestLock %s/%s is %s at revision %q, want Locked at %s: %+v", ns, name, ml.Status.State, ml.Status.LastAppliedRevision, revision, ml.Status.Conditions)
		}
		return nil
	})
	return ml
}

func replicasOf(t *testing.T, ns, name string) int64 {
	t.Helper()
	d := env.Get(t, "apps/v1", "deployments", ns, name)
	if d == nil {
		t.Fatalf("no Deployment %s/%s", ns, name)
	}
	n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	return n
}

func waitReplicas(t *testing.T, ns, name string, want int64) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		if got := replicasOf(t, ns, name); got != want {
			return fmt.Errorf("Deployment %s/%s has %d replicas, want %d", ns, name, got, want)
		}
		return nil
	})
}

// generatedConfigMap is the name of the ConfigMap the overlay generated,
// web-env-<hash>, which the Deployment refers to.
func generatedConfigMap(t *testing.T, ns string) string {
	t.Helper()
	d := env.Get(t, "apps/v1", "deployments", ns, "web")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	from, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "envFrom")
	name, _, _ := unstructured.NestedString(from[0].(map[string]any), "configMapRef", "name")
	if !strings.HasPrefix(name, "web-env-") || env.Get(t, "v1", "configmaps", ns, name) == nil {
		t.Fatalf("the Deployment refers to ConfigMap %q, want an existing web-env-<hash>", name)
	}
	return name
}
