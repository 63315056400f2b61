package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// testOptions builds from this test's own binary, which carries build
// information as a real one does, for both platforms.
func testOptions(t *testing.T) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Binaries: []Binary{
			{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Path: exe},
			{Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Path: exe},
		},
		Version: "1.2.3", Revision: "0123456789abcdef", Source: "https://example.com/helm-locker",
		Licenses: "Apache-2.0", Created: time.Unix(1700000000, 0).UTC(),
	}
}

// TestBuildIsReproducible: two builds of the same inputs are the same
// image, down to the index digest and the layout written, so a digest
// says which commit it came from.
func TestBuildIsReproducible(t *testing.T) {
	o := testOptions(t)
	var digests []v1.Hash
	var indexes []string
	for i := range 2 {
		b, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := b.Index.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		dir := filepath.Join(t.TempDir(), "oci")
		if i == 1 {
			// Written over an old layout, as `make image` twice does.
			if err := WriteLayout(dir, b, "old"); err != nil {
				t.Fatal(err)
			}
		}
		if err := WriteLayout(dir, b, o.Version); err != nil {
			t.Fatal(err)
		}
		index, err := os.ReadFile(filepath.Join(dir, "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, string(index))
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same inputs: index digests %s and %s", digests[0], digests[1])
	}
	if diff := cmp.Diff(indexes[0], indexes[1]); diff != "" {
		t.Errorf("two layouts of the same inputs differ (-first +second):\n%s", diff)
	}
	o.Revision = "fedcba9876543210"
	other, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := other.Index.Digest(); d == digests[0] {
		t.Error("another revision gave the same index digest")
	}
}

// TestBuildImages: each platform's image runs the binary as user 65532,
// from one layer holding that file alone, with the OCI labels; the index
// names each platform and carries the labels as annotations.
func TestBuildImages(t *testing.T) {
	o := testOptions(t)
	b, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	im, err := b.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := o.annotations()
	if diff := cmp.Diff(want, im.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	var platforms []string
	for _, desc := range im.Manifests {
		platforms = append(platforms, platformString(*desc.Platform))
		img, err := b.Index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != desc.Platform.Architecture || cfg.OS != "linux" {
			t.Errorf("image for %s: config says %s/%s", platformString(*desc.Platform), cfg.OS, cfg.Architecture)
		}
		if cfg.Config.User != User || !cmp.Equal(cfg.Config.Entrypoint, []string{Entrypoint}) {
			t.Errorf("image for %s: user %q, entrypoint %q", desc.Platform.Architecture, cfg.Config.User, cfg.Config.Entrypoint)
		}
		if diff := cmp.Diff(want, cfg.Config.Labels); diff != "" {
			t.Errorf("image for %s: labels (-want +got):\n%s", desc.Platform.Architecture, diff)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("image for %s: %d layers (%v), want 1", desc.Platform.Architecture, len(layers), err)
		}
		files := layerFiles(t, layers[0])
		if len(files) != 1 || files[0].Name != "helm-locker" || files[0].Mode != 0o755 || !files[0].ModTime.Equal(o.Created) || files[0].Uid != 0 {
			t.Errorf("image for %s: layer holds %+v, want the one file helm-locker, 0755, root's, dated %s", desc.Platform.Architecture, files, o.Created)
		}
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("index platforms (-want +got):\n%s", diff)
	}
}

func layerFiles(t *testing.T, l v1.Layer) []*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var files []*tar.Header
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hdr)
	}
}

// TestSBOM: the SBOM is an SPDX document naming the binary's modules as
// Go package URLs, carried by an artifact whose subject is the index.
func TestSBOM(t *testing.T) {
	o := testOptions(t)
	b, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(b.SBOM, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("SBOM is %s, created %s", doc.SPDXVersion, doc.CreationInfo.Created)
	}
	var purls []string
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			purls = append(purls, r.Locator)
		}
	}
	if !strings.Contains(strings.Join(purls, " "), "pkg:golang/github.com/google/go-containerregistry@v") {
		t.Errorf("the SBOM does not name go-containerregistry, which the binary links: %v", purls)
	}
	m, err := b.SBOMArtifact.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := b.Index.Digest()
	if m.ArtifactType != sbomMediaType || m.Subject == nil || m.Subject.Digest != idx || len(m.Layers) != 1 {
		t.Fatalf("SBOM artifact manifest %+v: want artifactType %s, subject %s, one blob", m, sbomMediaType, idx)
	}
	layers, err := b.SBOMArtifact.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, _ := io.ReadAll(rc)
	if string(got) != string(b.SBOM) {
		t.Error("the artifact's blob is not the SBOM")
	}

	// A layout holds both, the SBOM readable back by its digest.
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, b, o.Version); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	sd, _ := b.SBOMArtifact.Digest()
	if _, err := p.Blob(sd); err != nil {
		t.Errorf("the layout lacks the SBOM artifact %s: %v", sd, err)
	}
}

// TestSBOMNamesUnreadableBinary: a binary whose build information cannot
// be read is an error that names it, never an SBOM that leaves it out.
func TestSBOMNamesUnreadableBinary(t *testing.T) {
	o := testOptions(t)
	o.Binaries[1].Path = filepath.Join(t.TempDir(), "missing")
	if _, err := SBOM(o); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("SBOM of a missing binary: %v, want an error naming it", err)
	}
}
