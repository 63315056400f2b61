package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// sourcesResult is what a ManifestLock from a source costs: a lock of an
// ExternalArtifact whose artifact is a Kustomize overlay of Objects
// ConfigMaps, served over HTTP as source-controller serves one, and a new
// revision of it, every object changed, published Rounds times.
type sourcesResult struct {
	Objects int `json:"objects"`
	// FirstHeldS is from the lock's creation to its first revision held.
	FirstHeldS float64        `json:"firstHeldSeconds"`
	Rounds     []sourcesRound `json:"rounds"`
}

// sourcesRound is one new revision.
type sourcesRound struct {
	// HeldS is from the status write that names the new revision to the
	// lock Locked at it (status.lastAppliedRevision), read every 50 ms.
	HeldS float64 `json:"heldSeconds"`
	// QuietRSSMiB is the locker's RSS before the revision, and PeakRSSMiB
	// the most of it sampled every 20 ms until the revision was held.
	QuietRSSMiB float64 `json:"quietRSSMiB"`
	PeakRSSMiB  float64 `json:"peakRSSMiB"`
}

var externalArtifacts = schema.GroupVersionResource{Group: mlv1.SourceGroup, Version: "v1", Resource: "externalartifacts"}

// runSources measures sources and writes sources.md and sources.json.
func runSources(ctx context.Context, out, lockerBinary string, objects, rounds int) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	res, err := measureSources(ctx, tools, lockerBinary, objects, rounds)
	if err != nil {
		return fmt.Errorf("sources: %w", err)
	}
	md := sourcesMarkdown(res)
	fmt.Print(md)
	if err := writeJSON(filepath.Join(out, "sources.json"), res); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "sources.md"), []byte(md), 0o644)
}

func measureSources(ctx context.Context, tools controlplane.Tools, lockerBinary string, objects, rounds int) (*sourcesResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, stop, err := startEnv(ctx, cancel, tools)
	if err != nil {
		return nil, err
	}
	defer stop()
	crds, err := controlplane.FluxCRDs(ctx)
	if err != nil {
		return nil, err
	}
	for _, args := range [][]string{{"apply", "--server-side", "-f", crds}, {"wait", "--for=condition=Established", "crd/externalartifacts.source.toolkit.fluxcd.io", "--timeout=60s"}} {
		if out, err := exec.CommandContext(ctx, tools.Kubectl, append([]string{"--kubeconfig", env.cp.Kubeconfig}, args...)...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kubectl %s: %v\n%s", args[0], err, out)
		}
	}
	const ns = "bench-sources"
	if _, err := env.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	var mu sync.Mutex
	served := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		data, ok := served[r.URL.Path]
		mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	defer srv.Close()
	publish := func(revision int) (map[string]any, error) {
		data, err := overlayArtifact(ns, objects, revision)
		if err != nil {
			return nil, err
		}
		path := fmt.Sprintf("/rev-%d.tar.gz", revision)
		mu.Lock()
		served[path] = data
		mu.Unlock()
		sum := sha256.Sum256(data)
		return map[string]any{"url": srv.URL + path, "digest": "sha256:" + hex.EncodeToString(sum[:]), "revision": fmt.Sprintf("rev-%d", revision),
			"path": "externalartifact" + path, "lastUpdateTime": time.Now().UTC().Format(time.RFC3339)}, nil
	}
	artifacts := env.dyn.Resource(externalArtifacts).Namespace(v1alpha1Namespace)
	setArtifact := func(revision int) error {
		a, err := publish(revision)
		if err != nil {
			return err
		}
		ea, err := artifacts.Get(ctx, "overlay", metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedMap(ea.Object, a, "status", "artifact")
		_, err = artifacts.UpdateStatus(ctx, ea, metav1.UpdateOptions{})
		return err
	}
	ea := &unstructured.Unstructured{Object: map[string]any{"apiVersion": externalArtifacts.GroupVersion().String(), "kind": "ExternalArtifact",
		"metadata": map[string]any{"name": "overlay", "namespace": v1alpha1Namespace}}}
	if _, err := artifacts.Create(ctx, ea, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := setArtifact(0); err != nil {
		return nil, err
	}

	l, err := startLocker(lockerBinary, env.lockerKubeconfig, filepath.Join(env.dir, "locker-sources.log"))
	if err != nil {
		return nil, err
	}
	defer l.stop()
	res := &sourcesResult{Objects: objects}
	start := time.Now()
	ml := &unstructured.Unstructured{Object: map[string]any{"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": "overlay", "namespace": v1alpha1Namespace},
		"spec":     map[string]any{"sourceRef": map[string]any{"kind": "ExternalArtifact", "name": "overlay"}, "path": "overlay", "prune": true}}}
	if _, err := env.dyn.Resource(mlv1.Resource).Namespace(v1alpha1Namespace).Create(ctx, ml, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := waitHeld(ctx, env, "rev-0", nil); err != nil {
		return nil, err
	}
	res.FirstHeldS = time.Since(start).Seconds()

	for r := 1; r <= rounds; r++ {
		time.Sleep(2 * time.Second) // quiet
		quiet, err := l.rss()
		if err != nil {
			return nil, err
		}
		peak := quiet
		start := time.Now()
		if err := setArtifact(r); err != nil {
			return nil, err
		}
		err = waitHeld(ctx, env, fmt.Sprintf("rev-%d", r), func() {
			if rss, err := l.rss(); err == nil {
				peak = max(peak, rss)
			}
		})
		if err != nil {
			return nil, err
		}
		res.Rounds = append(res.Rounds, sourcesRound{HeldS: time.Since(start).Seconds(), QuietRSSMiB: float64(quiet) / (1 << 20), PeakRSSMiB: float64(peak) / (1 << 20)})
	}
	return res, nil
}

// waitHeld waits until the lock says Locked at revision, calling sample
// every 20 ms meanwhile.
func waitHeld(ctx context.Context, env *benchEnv, revision string, sample func()) error {
	deadline := time.Now().Add(5 * time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		if sample != nil {
			sample()
		}
		if i%(50/20+1) == 0 {
			u, err := env.dyn.Resource(mlv1.Resource).Namespace(v1alpha1Namespace).Get(ctx, "overlay", metav1.GetOptions{})
			if err != nil {
				return err
			}
			state, _, _ := unstructured.NestedString(u.Object, "status", "state")
			applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
			if state == string(mlv1.StateLocked) && applied == revision {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("the lock did not hold %s within 5 minutes", revision)
}

// overlayArtifact is a tar.gz of a base of n ConfigMaps, one file each,
// and an overlay that puts them in ns and labels them: revision changes
// every one of them.
func overlayArtifact(ns string, n, revision int) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name, body string) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write([]byte(body))
		return err
	}
	var resources strings.Builder
	for i := range n {
		name := fmt.Sprintf("cm-%04d.yaml", i)
		if err := add("base/"+name, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%04d\ndata:\n  revision: \"%d\"\n  config: |\n    a: 1\n    b: [x, y]\n", i, revision)); err != nil {
			return nil, err
		}
		resources.WriteString("- " + name + "\n")
	}
	if err := add("base/kustomization.yaml", "resources:\n"+resources.String()); err != nil {
		return nil, err
	}
	if err := add("overlay/kustomization.yaml", "namespace: "+ns+"\nlabels:\n- pairs: {team: bench}\nresources:\n- ../base\n"); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sourcesMarkdown(r *sourcesResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# A ManifestLock from a source\n\nA lock of an ExternalArtifact whose artifact is a Kustomize overlay of %d ConfigMaps, served over HTTP on loopback as source-controller serves one; each round publishes a new revision that changes every object. Made by `make bench` (e2e/cmd/bench, sources.go).\n\n", r.Objects)
	fmt.Fprintf(&b, "First revision held %.2f s after the lock was created (%d objects created).\n\n", r.FirstHeldS, r.Objects)
	b.WriteString("| round | new revision held (s) | objects/s | locker RSS before (MiB) | peak RSS while it builds (MiB) |\n|---|---|---|---|---|\n")
	for i, round := range r.Rounds {
		fmt.Fprintf(&b, "| %d | %.2f | %.0f | %.1f | %.1f |\n", i+1, round.HeldS, float64(r.Objects)/round.HeldS, round.QuietRSSMiB, round.PeakRSSMiB)
	}
	b.WriteString("\nHeld means `status.lastAppliedRevision` names the revision and the lock is Locked, read every 50 ms; RSS is sampled every 20 ms meanwhile, so a shorter peak can be missed.\n")
	return b.String()
}
