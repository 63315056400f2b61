package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/internal/artifact"
	"github.com/helm-locker/helm-locker/internal/overlay"
	"github.com/helm-locker/helm-locker/manifest"
)

// readObjects reads the objects of -f's files, or, with kustomize, of the
// one folder of -k.
func readObjects(files []string, kustomize bool, stdin io.Reader, h manifest.Helm) ([]*unstructured.Unstructured, error) {
	if kustomize {
		return readKustomization(files[0], h)
	}
	return readFiles(files, stdin, h)
}

// artifactRoot is the folder an artifact of dir would be made from, the
// Git checkout dir is in (as a GitRepository's artifact is the
// repository), or else dir itself; and dir's path inside it, as a
// ManifestLock's spec.path would name it. An overlay's bases above it
// are then found as the locker finds them.
func artifactRoot(dir string) (root, path string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			rel, err := filepath.Rel(d, abs)
			return d, filepath.ToSlash(rel), err
		}
		if filepath.Dir(d) == d {
			return abs, ".", nil
		}
	}
}

// readKustomization builds the folder dir as the locker builds a
// ManifestLock's spec.sourceRef artifact (internal/overlay): Kustomize
// with builtin plugins only, nothing remote, or its YAML files where it
// holds no kustomization; so that what `diff -k` shows and `lock -k`
// locks is what a lock from the same folder in Git would hold.
func readKustomization(dir string, h manifest.Helm) ([]*unstructured.Unstructured, error) {
	root, path, err := artifactRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	files, err := artifact.ReadDir(root, artifact.Limits{})
	if err != nil {
		return nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	text, err := overlay.Build(files, path, overlay.Limits{})
	if err != nil {
		return nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	objs, err := manifest.ParseRelease(text, h)
	if err != nil {
		return nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	return objs, nil
}
