package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entrypoint is where the binary sits in every platform's image, and what
// the image runs.
const Entrypoint = "/helm-locker"

// User is the image's user: distroless' nonroot, numeric so that a
// runAsNonRoot pod can tell it is not root without an /etc/passwd.
const User = "65532:65532"

// Binary is one platform's static executable.
type Binary struct {
	Platform v1.Platform
	Path     string
}

// Options say what goes into the image. Every field is fixed by the commit
// built, so that the result is too.
type Options struct {
	Binaries []Binary
	// Version, Revision and Source become the OCI labels and annotations,
	// and Created every timestamp in the image, the layer's files too.
	Version, Revision, Source string
	Licenses                  string
	Created                   time.Time
}

// Built is a multi-platform image with the SBOM that describes it.
type Built struct {
	Index v1.ImageIndex
	// SBOM is the SPDX document, and SBOMArtifact the OCI artifact that
	// carries it with the index as its subject.
	SBOM         []byte
	SBOMArtifact v1.Image
}

// Build makes one single-layer image per binary, an index of them, and
// their SBOM.
func Build(o Options) (*Built, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, b := range o.Binaries {
		img, err := platformImage(b, o)
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w", platformString(b.Platform), err)
		}
		platform := b.Platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	idx = mutate.Annotations(idx, o.annotations()).(v1.ImageIndex)

	sbom, err := SBOM(o)
	if err != nil {
		return nil, err
	}
	desc, err := descriptorOf(idx)
	if err != nil {
		return nil, err
	}
	artifact, err := newArtifact(sbomMediaType, sbom, desc, map[string]string{"org.opencontainers.image.created": o.created()})
	if err != nil {
		return nil, err
	}
	return &Built{Index: idx, SBOM: sbom, SBOMArtifact: artifact}, nil
}

// annotations are the OCI labels, on the index as annotations and on each
// image's config as labels, as `docker inspect` and registries show them.
func (o Options) annotations() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "helm-locker",
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.licenses": o.Licenses,
		"org.opencontainers.image.created":  o.created(),
	}
}

func (o Options) created() string { return o.Created.UTC().Format(time.RFC3339) }

func platformString(p v1.Platform) string { return path.Join(p.OS, p.Architecture, p.Variant) }

// platformImage is an image from scratch whose one layer holds the binary.
func platformImage(b Binary, o Options) (v1.Image, error) {
	layer, err := binaryLayer(b.Path, o.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "hack/image: " + Entrypoint, Comment: "the static helm-locker binary"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant
	cfg.Created = v1.Time{Time: o.Created}
	cfg.Config.Entrypoint = []string{Entrypoint}
	cfg.Config.User = User
	cfg.Config.Labels = o.annotations()
	return mutate.ConfigFile(img, cfg)
}

// binaryLayer is a gzipped tar of one file, the binary at Entrypoint,
// owned by root and executable by all, dated created: nothing in it comes
// from the machine that built it.
func binaryLayer(binary string, created time.Time) (v1.Layer, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: Entrypoint[1:], Mode: 0o755, Size: int64(len(data)),
		ModTime: created, Format: tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// descriptorOf is the descriptor that points at idx, for a referrer's
// subject.
func descriptorOf(idx v1.ImageIndex) (v1.Descriptor, error) {
	digest, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := idx.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: digest, Size: size}, nil
}
