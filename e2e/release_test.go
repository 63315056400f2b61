package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// TestReleaseImageAndChart: what a user installs is what `make image` and
// `make chart` publish, built with no Docker. Both push to an OCI registry
// served in this test process. The image index holds linux/amd64 and
// linux/arm64, the OCI labels and an SPDX SBOM as a referrer; each
// platform's one layer is its one binary, an ELF for that machine, and two
// builds of the commit give one digest. The chart, installed from the
// registry with no values, runs that image by tag, and by digest with
// image.digest; and the binary taken out of the amd64 image, run as the
// installed Deployment's container would, locks a release.
func TestReleaseImageAndChart(t *testing.T) {
	t.Parallel()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://") + "/e2e"
	version := strings.TrimSpace(makeIn(t, root, "-s", "version"))
	commit := strings.TrimSpace(gitIn(t, root, "rev-parse", "HEAD"))

	built := printedDigest(t, makeIn(t, root, "image"), "wrote ")
	pushed := printedDigest(t, makeIn(t, root, "image", "REGISTRY="+reg, "PLAIN_HTTP=1"), "pushed ")
	if built != pushed {
		t.Errorf("two builds of commit %s: index digests %s and %s", commit, built, pushed)
	}

	ref, err := name.ParseReference(reg+"/helm-locker:"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	index, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("the pushed image %s: %v", ref, err)
	}
	digest, _ := index.Digest()
	if digest.String() != pushed {
		t.Errorf("%s is %s, but make image said it pushed %s", ref, digest, pushed)
	}
	binaries := checkImageIndex(t, index, version, commit)
	checkSBOM(t, ref.Context().Digest(digest.String()))

	amd64 := filepath.Join(t.TempDir(), "helm-locker")
	if err := os.WriteFile(amd64, binaries[elf.EM_X86_64], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), amd64, "version").CombinedOutput()
	want := fmt.Sprintf(`^helm-locker %s \(commit %s, go1\.\S+, helm SDKs v3\.\S+ and v4\.\S+, client-go v0\.\S+\)\n$`, regexp.QuoteMeta(version), commit)
	if err != nil || !regexp.MustCompile(want).Match(out) {
		t.Errorf("the image's binary says (%v):\n%s\nwant it to match %s", err, out, want)
	}

	// The chart, from the registry, with no values.
	helmHome := t.TempDir()
	makeIn(t, root, "chart", "REGISTRY="+reg, "PLAIN_HTTP=1", "HELM="+env.Tools.Helm4,
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"), "HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"))
	chart := "oci://" + reg + "/charts/helm-locker"
	shown := env.Helm(t, framework.Helm4, "show", "chart", chart, "--version", version, "--plain-http")
	for _, line := range []string{"version: " + version, "appVersion: " + version} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(shown) {
			t.Errorf("the pushed chart's Chart.yaml lacks %q:\n%s", line, shown)
		}
	}
	registration := env.Namespace(t)
	release := registration // cluster-scoped names come from it
	fullname := chartFullname(release)
	env.Helm(t, framework.Helm4, "install", release, chart, "--version", version, "--plain-http", "-n", registration)
	if got, want := deploymentImage(t, registration, fullname), reg+"/helm-locker:"+version; got != want {
		t.Errorf("installed with no values, the Deployment runs %q, want %q", got, want)
	}
	env.Helm(t, framework.Helm4, "upgrade", release, chart, "--version", version, "--plain-http", "-n", registration, "--reuse-values", "--set", "image.digest="+pushed)
	if got, want := deploymentImage(t, registration, fullname), reg+"/helm-locker@"+pushed; got != want {
		t.Errorf("with image.digest, the Deployment runs %q, want %q", got, want)
	}

	// The image's binary, as that Deployment's container, locks a release.
	apps := env.Namespace(t)
	env.Kubectl(t, "-n", apps, "create", "serviceaccount", "helm-locker-writer")
	env.Kubectl(t, "-n", apps, "create", "rolebinding", "helm-locker-writer", "--clusterrole=edit", "--serviceaccount="+apps+":helm-locker-writer")
	env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "configmaps"), "-n", apps)
	runChartDeploymentOf(t, amd64, registration, "image-locker", fullname, fullname)
	cr := env.RegisterIn(t, registration, apps, "app")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	setKey(t, apps, "app-0", "drifted")
	env.Eventually(t, 30*time.Second, func() error {
		if got, _ := keyOf(t, apps, "app-0"); got != "declared" {
			return fmt.Errorf("ConfigMap %s/app-0 key = %q, want declared back", apps, got)
		}
		return nil
	})
}

// checkImageIndex holds the index to what `make image` promises, and
// returns each platform's binary by ELF machine.
func checkImageIndex(t *testing.T, index v1.ImageIndex, version, commit string) map[elf.Machine][]byte {
	t.Helper()
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.source":   "https://github.com/helm-locker/helm-locker",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	for k, want := range labels {
		if got := im.Annotations[k]; got != want {
			t.Errorf("index annotation %s = %q, want %q", k, got, want)
		}
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	binaries := map[elf.Machine][]byte{}
	var platforms []string
	for _, desc := range im.Manifests {
		p := desc.Platform.OS + "/" + desc.Platform.Architecture
		platforms = append(platforms, p)
		img, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range labels {
			if got := cfg.Config.Labels[k]; got != want {
				t.Errorf("%s image label %s = %q, want %q", p, k, got, want)
			}
		}
		if cfg.Config.User != "65532:65532" || !cmp.Equal(cfg.Config.Entrypoint, []string{"/helm-locker"}) {
			t.Errorf("%s image runs %q as %q, want /helm-locker as 65532:65532", p, cfg.Config.Entrypoint, cfg.Config.User)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s image has %d layers (%v), want 1", p, len(layers), err)
		}
		files := layerContents(t, layers[0])
		data, ok := files["helm-locker"]
		if len(files) != 1 || !ok {
			t.Fatalf("%s image's layer holds %d files, want the one binary helm-locker", p, len(files))
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s image's helm-locker is not an ELF: %v", p, err)
		}
		if want := machines[desc.Platform.Architecture]; f.Machine != want {
			t.Errorf("%s image's helm-locker is for %s, want %s", p, f.Machine, want)
		}
		binaries[f.Machine] = data
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Fatalf("the index's platforms (-want +got):\n%s", diff)
	}
	return binaries
}

// checkSBOM: the registry lists an SPDX SBOM under the index, naming the
// Helm SDKs the binary links.
func checkSBOM(t *testing.T, index name.Digest) {
	t.Helper()
	referrers, err := remote.Referrers(index)
	if err != nil {
		t.Fatal(err)
	}
	im, err := referrers.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var sbom []byte
	for _, desc := range im.Manifests {
		// The manifest's artifactType, which registries that derive the
		// listing's from the config's media type do not show.
		img, err := remote.Image(index.Context().Digest(desc.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := img.Manifest(); err != nil || m.ArtifactType != "application/spdx+json" {
			continue
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("the SBOM artifact has %d blobs (%v), want 1", len(layers), err)
		}
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		sbom, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if sbom == nil {
		t.Fatalf("no SPDX SBOM refers to %s; referrers: %+v", index, im.Manifests)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatalf("the SBOM is not JSON: %v", err)
	}
	found := map[string]bool{}
	for _, p := range doc.Packages {
		found[p.Name] = p.VersionInfo != ""
	}
	for _, m := range []string{"helm.sh/helm/v3", "helm.sh/helm/v4", "k8s.io/client-go", "github.com/helm-locker/helm-locker"} {
		if !found[m] {
			t.Errorf("the SBOM (%s) names no version of %s", doc.SPDXVersion, m)
		}
	}
}

// layerContents is each file in a layer, by name.
func layerContents(t *testing.T, l v1.Layer) map[string][]byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[hdr.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// printedDigest is the digest hack/image printed after prefix.
func printedDigest(t *testing.T, out, prefix string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + prefix + `\S+@(sha256:[0-9a-f]{64})$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("make image printed no %q line with a digest:\n%s", prefix, out)
	}
	return m[1]
}

func deploymentImage(t *testing.T, ns, name string) string {
	t.Helper()
	d := env.Get(t, "apps/v1", "deployments", ns, name)
	if d == nil {
		t.Fatalf("no Deployment %s/%s", ns, name)
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	image, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	return image
}

// makeIn runs make in dir with the given targets and variables; a cold
// build of both platforms takes minutes on 2 cores.
func makeIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return runIn(t, dir, 20*time.Minute, "make", args...)
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return runIn(t, dir, time.Minute, "git", args...)
}

func runIn(t *testing.T, dir string, timeout time.Duration, command string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", command, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
