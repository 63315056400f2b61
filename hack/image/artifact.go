package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sbomMediaType is SPDX's JSON media type, the SBOM artifact's type and its
// one blob's.
const sbomMediaType = "application/spdx+json"

// emptyConfig is the OCI image spec's empty descriptor: an artifact's
// config when it has none (image-spec v1.1, "Guidelines for Artifact
// Usage").
var emptyConfig = []byte("{}")

// artifact is an OCI 1.1 artifact manifest: one blob, an artifactType, and
// a subject that registries list it under (the referrers API, or the
// sha256-<digest> tag where they lack it). go-containerregistry builds
// images; this is the little it takes to give it an artifact.
type artifact struct {
	manifest []byte
	blob     v1.Layer
}

var _ partial.CompressedImageCore = (*artifact)(nil)

func newArtifact(mediaType string, blob []byte, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	layer := static.NewLayer(blob, types.MediaType(mediaType))
	digest, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  mediaType,
		Config: v1.Descriptor{
			MediaType: types.OCIEmptyJSON,
			Digest:    v1.Hash{Algorithm: "sha256", Hex: sha256Hex(emptyConfig)},
			Size:      int64(len(emptyConfig)),
		},
		Layers:      []v1.Descriptor{{MediaType: types.MediaType(mediaType), Digest: digest, Size: int64(len(blob))}},
		Subject:     &subject,
		Annotations: annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, blob: layer})
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return bytes.Clone(emptyConfig), nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.blob.Digest(); err == nil && d == h {
		return a.blob, nil
	}
	return nil, fmt.Errorf("the artifact has no blob %s", h)
}
