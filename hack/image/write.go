package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteLayout writes the index, tagged version, and its SBOM artifact as a
// fresh OCI layout in dir: what a registry would hold, for `crane push`,
// `oras cp` or `skopeo copy` to take anywhere.
func WriteLayout(dir string, b *Built, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(b.Index, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version})); err != nil {
		return fmt.Errorf("writing the index to %s: %w", dir, err)
	}
	if err := p.AppendImage(b.SBOMArtifact); err != nil {
		return fmt.Errorf("writing the SBOM to %s: %w", dir, err)
	}
	return nil
}

// Push writes the index as ref and its SBOM as a referrer of it, with the
// credentials of the Docker config (as `docker login`, `crane auth login`
// or a CI login step leave them).
func Push(ref name.Reference, b *Built) error {
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := remote.WriteIndex(ref, b.Index, opts...); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	digest, err := b.SBOMArtifact.Digest()
	if err != nil {
		return err
	}
	// By digest: the registry lists it under the index it names as its
	// subject, so it needs no tag of its own.
	if err := remote.Write(ref.Context().Digest(digest.String()), b.SBOMArtifact, opts...); err != nil {
		return fmt.Errorf("pushing the SBOM of %s: %w", ref, err)
	}
	return nil
}
