package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/informers"
)

// source is the object a ManifestLock reads its manifest from: a
// ConfigMap or Secret, or a Flux source of resource gvr.
type source struct {
	kind      string // "configmaps" or "secrets", or empty with gvr
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// sourceWatches watches the one object each ManifestLock reads its
// manifest from, with a list and watch selecting it by name, and queues
// the lock when it changes. Watching every ConfigMap and Secret of the
// cluster for the few that hold manifests would cost far more.
type sourceWatches struct {
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	mapper  meta.ResettableRESTMapper
	enqueue func(key lockKey)

	mu sync.Mutex
	// ctx is Run's: watches start only while it runs.
	ctx     context.Context
	watches map[lockKey]*sourceWatch
	// unserved are the locks whose source's kind the cluster did not
	// serve, to sync again when a CRD appears.
	unserved map[lockKey]bool
}

// waitForTypes has the lock key synced again when a CRD appears.
func (s *sourceWatches) waitForTypes(key lockKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unserved == nil {
		s.unserved = map[lockKey]bool{}
	}
	s.unserved[key] = true
}

// typesChanged runs when a CRD comes or goes: each lock waiting for its
// source's kind looks again, with discovery read afresh.
func (s *sourceWatches) typesChanged() {
	s.mu.Lock()
	keys := s.unserved
	s.unserved = nil
	s.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	if s.mapper != nil {
		s.mapper.Reset()
	}
	for key := range keys {
		s.enqueue(key)
	}
}

type sourceWatch struct {
	source
	stop context.CancelFunc
}

// run makes watches start with ctx, and stops them all when it ends.
func (s *sourceWatches) run(ctx context.Context) {
	s.mu.Lock()
	s.ctx = ctx
	for _, w := range s.watches {
		s.startLocked(w)
	}
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, w := range s.watches {
		if w.stop != nil {
			w.stop()
		}
		delete(s.watches, key)
	}
}

// watch makes src the one object watched for the lock key; nil watches
// nothing.
func (s *sourceWatches) watch(key lockKey, src *source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches == nil {
		s.watches = map[lockKey]*sourceWatch{}
	}
	old := s.watches[key]
	if old != nil && src != nil && old.source == *src {
		return
	}
	if old != nil {
		if old.stop != nil {
			old.stop()
		}
		delete(s.watches, key)
	}
	if src == nil {
		return
	}
	w := &sourceWatch{source: *src}
	s.watches[key] = w
	s.startLocked(w)
}

func (s *sourceWatches) startLocked(w *sourceWatch) {
	if s.ctx == nil || s.ctx.Err() != nil || w.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	w.stop = cancel
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.name).String()
	}
	var obj runtime.Object
	var lw *cache.ListWatch
	switch w.kind {
	case "":
		obj = &unstructured.Unstructured{}
		client := s.dynamic.Resource(w.gvr).Namespace(w.namespace)
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				byName(&o)
				return client.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				byName(&o)
				return client.Watch(ctx, o)
			},
		}
	case "secrets":
		obj = &corev1.Secret{}
		lw = cache.NewFilteredListWatchFromClient(s.kube.CoreV1().RESTClient(), w.kind, w.namespace, byName)
	default:
		obj = &corev1.ConfigMap{}
		lw = cache.NewFilteredListWatchFromClient(s.kube.CoreV1().RESTClient(), w.kind, w.namespace, byName)
	}
	inf := cache.NewSharedIndexInformer(informers.Guard(lw, nil, nil), obj, 0, cache.Indexers{})
	// Only the lock's key is needed; the object is read afresh by the
	// sync it queues.
	_ = inf.SetTransform(func(o any) (any, error) {
		if m, err := meta.Accessor(o); err == nil {
			return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: m.GetName(), ResourceVersion: m.GetResourceVersion()}}, nil
		}
		return o, nil
	})
	var key lockKey
	for k, v := range s.watches {
		if v == w {
			key = k
		}
	}
	enqueue := func(any) { s.enqueue(key) }
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, o any) {
			// A relist restates what did not change.
			if a, err := meta.Accessor(old); err == nil {
				if b, err := meta.Accessor(o); err == nil && a.GetResourceVersion() == b.GetResourceVersion() {
					return
				}
			}
			enqueue(o)
		},
		DeleteFunc: enqueue,
	})
	go inf.RunWithContext(ctx)
}

// errNoManifest says a ManifestLock names no manifest.
var errNoManifest = errors.New("the lock names no manifest: set spec.manifest, spec.manifestFrom or spec.sourceRef")

// manifestText reads the lock's manifest, and watches where it is kept;
// revision is the source's, for a spec.sourceRef.
func (c *Controller) manifestText(ctx context.Context, key lockKey, ml *mlv1.ManifestLock, st *manifestState) (text, revision string, err error) {
	from := ml.Spec.ManifestFrom
	if ml.Spec.SourceRef != nil {
		if from != nil || ml.Spec.Manifest != "" {
			c.sources.watch(key, nil)
			return "", "", fmt.Errorf("%w; exactly one of spec.manifest, spec.manifestFrom and spec.sourceRef may be set", errNoManifest)
		}
		return c.sourceText(ctx, key, ml, st)
	}
	// No source: no revision, and nothing built from one to keep.
	st.attempted, st.built = "", builtSource{}
	text, err = c.storedManifest(ctx, key, ml)
	return text, "", err
}

// storedManifest reads spec.manifest, or the ConfigMap or Secret key
// spec.manifestFrom names.
func (c *Controller) storedManifest(ctx context.Context, key lockKey, ml *mlv1.ManifestLock) (string, error) {
	from := ml.Spec.ManifestFrom
	switch {
	case from == nil && ml.Spec.Manifest == "":
		c.sources.watch(key, nil)
		return "", errNoManifest
	case from == nil:
		c.sources.watch(key, nil)
		return ml.Spec.Manifest, nil
	case ml.Spec.Manifest != "" || (from.ConfigMapRef == nil) == (from.SecretRef == nil):
		c.sources.watch(key, nil)
		return "", fmt.Errorf("%w; exactly one of spec.manifest, spec.manifestFrom.configMapRef and spec.manifestFrom.secretRef may be set", errNoManifest)
	case from.ConfigMapRef != nil:
		r := from.ConfigMapRef
		c.sources.watch(key, &source{kind: "configmaps", namespace: ml.Namespace, name: r.Name})
		cm, err := c.cfg.Kube.CoreV1().ConfigMaps(ml.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("reading spec.manifestFrom.configMapRef: %w", err)
		}
		text, ok := cm.Data[r.Key]
		if !ok {
			return "", fmt.Errorf("%w: ConfigMap %s/%s has no key %q", errNoManifest, ml.Namespace, r.Name, r.Key)
		}
		return text, nil
	default:
		r := from.SecretRef
		c.sources.watch(key, &source{kind: "secrets", namespace: ml.Namespace, name: r.Name})
		s, err := c.cfg.Kube.CoreV1().Secrets(ml.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("reading spec.manifestFrom.secretRef: %w", err)
		}
		data, ok := s.Data[r.Key]
		if !ok {
			return "", fmt.Errorf("%w: Secret %s/%s has no key %q", errNoManifest, ml.Namespace, r.Name, r.Key)
		}
		return string(data), nil
	}
}
