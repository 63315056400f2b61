// Command image puts helm-locker's static Linux binaries into one
// multi-platform OCI image, with no Docker engine and no base image: each
// platform's image is a single layer holding the binary, and the index
// carries an SPDX SBOM of the Go modules the binary was built from as an
// OCI referrer. It writes an OCI layout, or pushes to a registry.
//
// Everything that goes in is fixed by the source (the binaries, the
// version, the commit and its time), so two builds of one commit give the
// same index digest.
//
//	go run ./hack/image --version V --revision SHA --created UNIX \
//	  --binary linux/amd64=bin/image/linux_amd64/helm-locker \
//	  --binary linux/arm64=bin/image/linux_arm64/helm-locker \
//	  [--layout bin/oci | --push REGISTRY/helm-locker:V [--plain-http]] \
//	  [--sbom FILE] [--digest-file FILE]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// binaryFlags collects --binary OS/ARCH=PATH, in the order given.
type binaryFlags []Binary

func (b *binaryFlags) String() string { return fmt.Sprint(*b) }

func (b *binaryFlags) Set(s string) error {
	platform, path, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || path == "" || osName == "" || arch == "" {
		return fmt.Errorf("--binary %q: want OS/ARCH=PATH", s)
	}
	*b = append(*b, Binary{Platform: v1.Platform{OS: osName, Architecture: arch}, Path: path})
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var binaries binaryFlags
	fs.Var(&binaries, "binary", "OS/ARCH=PATH of a static binary, once per platform")
	version := fs.String("version", "", "the version the binaries were stamped with")
	revision := fs.String("revision", "", "the commit they were built from")
	created := fs.String("created", "", "the commit's time, in seconds since 1970 (SOURCE_DATE_EPOCH)")
	source := fs.String("source", "https://github.com/helm-locker/helm-locker", "the source repository's URL")
	licenses := fs.String("licenses", "Apache-2.0", "the SPDX license expression of the source, as rancher/helm-locker's")
	layoutDir := fs.String("layout", "", "write the index and its SBOM as an OCI layout in this folder")
	sbomFile := fs.String("sbom", "", "also write the SBOM to this file")
	digestFile := fs.String("digest-file", "", "also write the index digest to this file, for signing by digest")
	push := fs.String("push", "", "push the index and its SBOM as this reference (REGISTRY/REPOSITORY:TAG)")
	plainHTTP := fs.Bool("plain-http", false, "push over HTTP without TLS, for a registry on loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(binaries) == 0 || *version == "" || *revision == "" || *created == "" {
		return errors.New("--binary, --version, --revision and --created are required")
	}
	if (*layoutDir == "") == (*push == "") {
		return errors.New("give exactly one of --layout and --push")
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: %w", *created, err)
	}
	built, err := Build(Options{
		Binaries: binaries, Version: *version, Revision: *revision, Source: *source, Licenses: *licenses,
		Created: time.Unix(secs, 0).UTC(),
	})
	if err != nil {
		return err
	}
	if *sbomFile != "" {
		if err := os.WriteFile(*sbomFile, built.SBOM, 0o644); err != nil {
			return err
		}
	}
	digest, err := built.Index.Digest()
	if err != nil {
		return err
	}
	if *digestFile != "" {
		if err := os.WriteFile(*digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	if *layoutDir != "" {
		if err := WriteLayout(*layoutDir, built, *version); err != nil {
			return err
		}
		fmt.Printf("wrote %s@%s\n", *layoutDir, digest)
		return nil
	}
	var opts []name.Option
	if *plainHTTP {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(*push, opts...)
	if err != nil {
		return fmt.Errorf("--push %q: %w", *push, err)
	}
	if err := Push(ref, built); err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", ref.Context(), digest)
	return nil
}
