package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	helmtime "helm.sh/helm/v3/pkg/time"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

var (
	cmGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	svcGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	deployGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	secretGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// payload is about 1 KB of ConfigMap data, the size the issue names: a
// config file, different in every object, with the mix of names, numbers,
// addresses and ids real ones have. A repeated string would compress
// fiftyfold where a config file compresses two- to fourfold, and the
// locker keeps declarations deflated.
func payload(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(h.Sum64(), 1))
	words := []string{"server", "listen", "upstream", "timeout", "retries", "cache", "log", "level", "tls", "cert", "pool", "size", "workers", "backend", "route", "weight", "health", "interval", "path", "limit"}
	var b strings.Builder
	for b.Len() < 1000 {
		key := words[rng.IntN(len(words))] + "." + words[rng.IntN(len(words))]
		switch rng.IntN(5) {
		case 0:
			fmt.Fprintf(&b, "%s = %d\n", key, rng.IntN(100000))
		case 1:
			fmt.Fprintf(&b, "%s = svc-%06x.%s.svc.cluster.local:%d\n", key, rng.Uint32()&0xffffff, words[rng.IntN(len(words))], 1024+rng.IntN(60000))
		case 2:
			fmt.Fprintf(&b, "%s = %ds\n", key, rng.IntN(600))
		case 3:
			fmt.Fprintf(&b, "%s = %t\n", key, rng.IntN(2) == 0)
		default:
			fmt.Fprintf(&b, "%s = %016x\n", key, rng.Uint64())
		}
	}
	return b.String()
}

// releaseObjects returns the M objects of a release: 60% ConfigMaps, 20%
// Services, 20% Secrets, none with metadata.namespace, as charts write them.
// A real-chart-shaped release has Deployments in place of the Services,
// written as widely used charts write them: quantities in forms the API
// server stores otherwise (cpu 0.5, memory 1024Mi), the empty maps and
// lists left by {{- with }} and toYaml of empty defaults, and fields the
// API server defaults.
func releaseObjects(name string, m int, realChart bool) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for j := range m {
		obj := map[string]any{"metadata": map[string]any{
			"name":   fmt.Sprintf("%s-%d", name, j),
			"labels": map[string]any{"app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "Helm"},
		}}
		switch {
		case j%5 == 3 && realChart:
			obj["apiVersion"], obj["kind"] = "apps/v1", "Deployment"
			app := map[string]any{"app": fmt.Sprintf("%s-%d", name, j)}
			obj["spec"] = map[string]any{
				"replicas": int64(1),
				"selector": map[string]any{"matchLabels": app},
				"template": map[string]any{
					"metadata": map[string]any{"labels": app, "annotations": map[string]any{}},
					"spec": map[string]any{
						"nodeSelector": map[string]any{},
						"tolerations":  []any{},
						"containers": []any{map[string]any{
							"name": "app", "image": "registry.invalid/app:1", "env": []any{},
							"ports": []any{map[string]any{"name": "http", "containerPort": int64(8080)}},
							"resources": map[string]any{
								"requests": map[string]any{"cpu": 0.5, "memory": "134217728"},
								"limits":   map[string]any{"cpu": "1000m", "memory": "1024Mi"},
							},
						}},
					},
				},
			}
		case j%5 == 3:
			obj["apiVersion"], obj["kind"] = "v1", "Service"
			obj["spec"] = map[string]any{"ports": []any{map[string]any{"name": "http", "port": int64(80), "targetPort": "http", "protocol": "TCP"}},
				"selector": map[string]any{"app": name}}
		case j%5 == 4:
			obj["apiVersion"], obj["kind"] = "v1", "Secret"
			obj["type"] = "Opaque"
			obj["data"] = map[string]any{"password": "c2VjcmV0"}
		default:
			obj["apiVersion"], obj["kind"] = "v1", "ConfigMap"
			obj["data"] = map[string]any{"key": "declared", "payload": payload(name + fmt.Sprint(j))}
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	return objs
}

func gvrOf(obj *unstructured.Unstructured) schema.GroupVersionResource {
	switch obj.GetKind() {
	case "Service":
		return svcGVR
	case "Secret":
		return secretGVR
	case "Deployment":
		return deployGVR
	default:
		return cmGVR
	}
}

// manifestOf renders objects the way Helm stores a manifest.
func manifestOf(objs []*unstructured.Unstructured) (string, error) {
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "---\n# Source: bench/templates/%s.yaml\n%s", o.GetName(), y)
	}
	return b.String(), nil
}

// templatesOf is a chart's templates that render objects as manifestOf
// stores them: one template each, holding the object as it is, so that a
// render of the release is its manifest. Nothing in the objects reads as
// a template action.
func templatesOf(objs []*unstructured.Unstructured) ([]*chart.File, error) {
	var files []*chart.File
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		files = append(files, &chart.File{Name: "templates/" + o.GetName() + ".yaml", Data: y})
	}
	return files, nil
}

// writerServiceAccount is the write identity of TwoWay releases: a
// ServiceAccount in each release namespace, bound to the ClusterRole edit
// there, as a tenant's deployer is.
const writerServiceAccount = "writer"

// createWriters makes writerServiceAccount and its RoleBinding in each of
// namespaces.
func createWriters(ctx context.Context, kube kubernetes.Interface, namespaces []string) error {
	for _, ns := range namespaces {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: writerServiceAccount, Namespace: ns}}
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: writerServiceAccount, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: writerServiceAccount, Namespace: ns}},
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// setup creates the releases (objects, Helm's release Secret written by
// Helm's own storage driver, and a HelmRelease CR each) and the untracked
// objects. It returns the locked ConfigMaps, by release, for edits.
func setup(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, p params) (map[string][]ref, error) {
	locked, err := setupReleases(ctx, kube, dyn, p)
	if err != nil {
		return nil, err
	}
	return locked, createCRs(ctx, dyn, p)
}

// createCRs registers every release with a HelmRelease CR, all at once.
func createCRs(ctx context.Context, dyn dynamic.Interface, p params) error {
	work := newPool(ctx)
	for i := range p.Releases {
		name, ns := fmt.Sprintf("r%04d", i), fmt.Sprintf("rel-%d", i%p.namespaces())
		work.send(func() error {
			spec := map[string]any{"release": map[string]any{"name": name, "namespace": ns}}
			if p.TwoWay {
				spec["serviceAccountName"] = writerServiceAccount
			}
			hr := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
				"metadata": map[string]any{"name": name, "namespace": v1alpha1Namespace},
				"spec":     spec,
			}}
			_, err := dyn.Resource(v1alpha1.Resource).Namespace(v1alpha1Namespace).Create(ctx, hr, metav1.CreateOptions{})
			return err
		})
	}
	if err := work.wait(); err != nil {
		return fmt.Errorf("creating the HelmReleases: %w", err)
	}
	return nil
}

// setupReleases is setup but for the CRs: releases no lock names yet.
func setupReleases(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, p params) (map[string][]ref, error) {
	work := newPool(ctx)
	send := work.send

	namespaces := []string{}
	for i := range p.namespaces() {
		namespaces = append(namespaces, fmt.Sprintf("rel-%d", i))
	}
	namespaces = append(namespaces, v1alpha1Namespace)
	for _, ns := range namespaces {
		// The registration namespace is the locker's own, made with it.
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	if p.TwoWay {
		// The release namespaces: all but the registration namespace.
		if err := createWriters(ctx, kube, namespaces[:len(namespaces)-1]); err != nil {
			return nil, err
		}
	}

	locked := map[string][]ref{}
	for i := range p.Releases {
		name := fmt.Sprintf("r%04d", i)
		ns := fmt.Sprintf("rel-%d", i%p.namespaces())
		objs := releaseObjects(name, p.Objects, realChart(i))
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" {
				locked[name] = append(locked[name], ref{ns: ns, name: o.GetName()})
			}
			// As Helm applies it: with the ownership annotations it
			// adds, which the stored manifest lacks.
			applied := o.DeepCopy()
			applied.SetAnnotations(map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns})
			send(func() error {
				_, err := dyn.Resource(gvrOf(applied)).Namespace(ns).Create(ctx, applied, metav1.CreateOptions{FieldManager: "helm"})
				return err
			})
		}
		send(func() error {
			manifest, err := manifestOf(objs)
			if err != nil {
				return err
			}
			ch := &chart.Chart{Metadata: &chart.Metadata{Name: "bench", Version: "0.1.0", APIVersion: "v2"}}
			if p.TwoWay {
				if ch.Templates, err = templatesOf(objs); err != nil {
					return err
				}
			}
			now := helmtime.Now()
			rel := &release.Release{
				Name: name, Namespace: ns, Version: 1, Manifest: manifest,
				Info:  &release.Info{FirstDeployed: now, LastDeployed: now, Status: release.StatusDeployed, Description: "Install complete"},
				Chart: ch,
			}
			return driver.NewSecrets(kube.CoreV1().Secrets(ns)).Create(fmt.Sprintf("sh.helm.release.v1.%s.v1", name), rel)
		})
	}
	if err := work.wait(); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	if err := addUntracked(ctx, kube, dyn, 0, p.Untracked); err != nil {
		return nil, err
	}
	return locked, nil
}

// untrackedPerNamespace is how many untracked objects share a namespace.
const untrackedPerNamespace = 1000

// addUntracked creates untracked objects from the from-th to the one before
// the to-th: objects of the kinds the releases lock, in namespaces no
// release uses, so that the locker's informers see them and hold a stub
// each.
func addUntracked(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, from, to int) error {
	for i := from; i < to; i += untrackedPerNamespace {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("noise-%d", i/untrackedPerNamespace)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	work := newPool(ctx)
	for i := from; i < to; i++ {
		ns := fmt.Sprintf("noise-%d", i/untrackedPerNamespace)
		objs := releaseObjects(fmt.Sprintf("u%06d", i), 5, false)
		o := objs[i%5]
		o.SetName(fmt.Sprintf("u%06d", i))
		if o.GetKind() == "Service" {
			// Headless: allocating a cluster IP slows as the range
			// fills, to 15 creations a second past 40,000 Services,
			// which made the 16x B row take hours.
			_ = unstructured.SetNestedField(o.Object, "None", "spec", "clusterIP")
		}
		work.send(func() error {
			_, err := dyn.Resource(gvrOf(o)).Namespace(ns).Create(ctx, o, metav1.CreateOptions{})
			return err
		})
	}
	if err := work.wait(); err != nil {
		return fmt.Errorf("creating untracked objects: %w", err)
	}
	return nil
}

// pool runs jobs on 16 goroutines, and keeps the first error.
type pool struct {
	ctx      context.Context
	work     chan func() error
	wg       sync.WaitGroup
	mu       sync.Mutex
	firstErr error
}

func newPool(ctx context.Context) *pool {
	p := &pool{ctx: ctx, work: make(chan func() error)}
	for range 16 {
		p.wg.Go(func() {
			for job := range p.work {
				if err := job(); err != nil {
					p.mu.Lock()
					if p.firstErr == nil {
						p.firstErr = err
					}
					p.mu.Unlock()
				}
			}
		})
	}
	return p
}

func (p *pool) send(job func() error) {
	select {
	case p.work <- job:
	case <-p.ctx.Done():
	}
}

// wait waits for the jobs sent, and returns the first error.
func (p *pool) wait() error {
	close(p.work)
	p.wg.Wait()
	if p.firstErr != nil {
		return p.firstErr
	}
	return p.ctx.Err()
}

// ref names a namespaced object.
type ref struct{ ns, name string }

// v1alpha1Namespace is the registration namespace the locker serves.
const v1alpha1Namespace = "cattle-helm-system"

// realChart says which releases carry real-chart-shaped objects: half.
func realChart(release int) bool { return release%2 == 1 }

// objectRef addresses any object of a release.
type objectRef struct {
	gvr      schema.GroupVersionResource
	ns, name string
}

// releaseRefs lists every object of every release, as setup made them.
func releaseRefs(p params) []objectRef {
	var out []objectRef
	for i := range p.Releases {
		name := fmt.Sprintf("r%04d", i)
		for _, o := range releaseObjects(name, p.Objects, realChart(i)) {
			out = append(out, objectRef{gvr: gvrOf(o), ns: fmt.Sprintf("rel-%d", i%p.namespaces()), name: o.GetName()})
		}
	}
	return out
}
