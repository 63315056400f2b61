package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/informers"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// The controller's wiring: what New builds, step by step.

// newEngine builds the engine that holds the locks' objects.
func (c *Controller) newEngine() {
	cfg := c.cfg
	// A CRD that comes or goes changes the APIs charts see.
	engineOpts := engine.Options{Config: cfg.REST, Readiness: cfg.Readiness, OnTypesChanged: func() { c.twoway.ClusterMoved(); c.sources.typesChanged(); c.chartSources.typesChanged() }}
	engineOpts.OpenAPI = cfg.OpenAPI
	if engineOpts.OpenAPI == nil && cfg.REST != nil && cfg.Kube != nil {
		// Merge rules are the API server's own, from its OpenAPI v3.
		engineOpts.OpenAPI = openapi.ToClientWithContext(cfg.Kube.Discovery().OpenAPIV3())
	}
	c.engine = engine.New(cfg.Dynamic, cfg.Mapper, c.enqueueSet, engineOpts)
}

// newHealth builds what says whether the CR and Secret caches see changes
// as they happen.
func (c *Controller) newHealth() {
	// A change of either cache's health changes what every CR may claim.
	// Watches that reconnect may do so to an upgraded API server.
	c.crsHealth = informers.NewHealth(func(current bool) {
		c.enqueueAll()
		if current {
			c.twoway.ClusterMoved()
		}
	})
	c.locksHealth = informers.NewHealth(func(bool) { c.enqueueAll() })
	c.secretsHealth = informers.NewHealth(func(bool) { c.enqueueAll() })
}

// watchClients are the clients the controller's own informers watch
// with.
func (c *Controller) watchClients() (dynamic.Interface, metadata.Interface) {
	cfg := c.cfg
	watchDynamic, watchMetadata := cfg.Dynamic, cfg.Metadata
	if cfg.REST != nil {
		// Guard, not client-go, paces retries (see
		// informers.WatchConfig). Building clients does no I/O, and a
		// config they cannot use fails the others too.
		if d, err := dynamic.NewForConfig(informers.WatchConfig(cfg.REST)); err == nil {
			watchDynamic = d
		}
		if m, err := metadata.NewForConfig(informers.WatchConfig(cfg.REST)); err == nil {
			watchMetadata = m
		}
	}
	return watchDynamic, watchMetadata
}

// newCRInformers builds the informers of the HelmRelease and ManifestLock
// CRs, which queue their locks.
func (c *Controller) newCRInformers(watchDynamic dynamic.Interface) {
	cfg := c.cfg
	c.crs = c.crInformer(watchDynamic, watchDynamic.Resource(v1alpha1.Resource).Namespace(cfg.Namespace), c.crsHealth,
		cache.Indexers{byRelease: crReleaseIndex}, v1alpha1.Resource.String())
	_ = c.crs.SetTransform(compact[v1alpha1.HelmRelease])
	_, _ = c.crs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueCR,
		UpdateFunc: func(old, obj any) {
			c.enqueueCR(obj)
			c.writerMayBeUnused(old, obj)
		},
		// A CR that goes may leave its release to another, and its
		// writer to no one.
		DeleteFunc: func(obj any) {
			c.enqueueReleaseCRs(obj)
			c.writersMayBeUnused()
		},
	})

	var locks dynamic.ResourceInterface = watchDynamic.Resource(mlv1.Resource)
	if !cfg.TenantManifestLocks {
		locks = watchDynamic.Resource(mlv1.Resource).Namespace(cfg.Namespace)
	}
	c.locks = c.crInformer(watchDynamic, locks, c.locksHealth, nil, mlv1.Resource.String())
	_ = c.locks.SetTransform(compact[mlv1.ManifestLock])
	_, _ = c.locks.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueManifestLock,
		UpdateFunc: func(old, obj any) {
			c.enqueueManifestLock(obj)
			c.writerMayBeUnused(old, obj)
		},
		DeleteFunc: func(obj any) {
			c.enqueueManifestLock(obj)
			c.writersMayBeUnused()
		},
	})
}

// newSecretInformer builds the informer of release Secrets, which queues
// the locks of their releases.
func (c *Controller) newSecretInformer(watchMetadata metadata.Interface) {
	// Release Secrets are watched as metadata only, selected by Helm's
	// owner label: their labels carry the status and revision, and the
	// payload is read only for the revision being locked.
	secrets := watchMetadata.Resource(secretsResource)
	c.secrets = cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(informers.Guard(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = storage.OwnedSelector
				return secrets.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = storage.OwnedSelector
				return secrets.Watch(ctx, o)
			},
		}, c.cfg.Readiness, c.secretsHealth), watchMetadata),
		&metav1.PartialObjectMetadata{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{byRelease: secretReleaseIndex}, ObjectDescription: "release Secrets"})
	_ = c.secrets.SetTransform(keepLastWrite)
	_, _ = c.secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueForSecret,
		UpdateFunc: func(_, obj any) { c.enqueueForSecret(obj) },
		DeleteFunc: c.enqueueForSecret,
	})
}

// crInformer is an informer of the CRs r lists that Config.Selector
// selects, paced by informers.Guard, which reports whether it sees changes
// as they happen to health. The API server sends a watch event that takes
// a CR out of the selector as a deletion.
func (c *Controller) crInformer(client dynamic.Interface, r dynamic.ResourceInterface, health *informers.Health, indexers cache.Indexers, desc string) cache.SharedIndexInformer {
	selector := ""
	if c.cfg.Selector != nil {
		selector = c.cfg.Selector.String()
	}
	return cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(informers.Guard(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = selector
				return r.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = selector
				return r.Watch(ctx, o)
			},
		}, c.cfg.Readiness, health), client),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{Indexers: indexers, ObjectDescription: desc})
}

// compact is what the CR caches keep of a HelmRelease or a ManifestLock:
// the typed object without its managedFields. As nested maps, a
// HelmRelease with its status and the managedFields of the status writes
// took about 17 KB; each release paid that. An object that does not
// convert (the CRD's schema makes that unreachable) is kept as it came,
// for sync to report.
func compact[T any, P interface {
	*T
	metav1.Object
}](obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	typed := P(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return obj, nil
	}
	typed.SetManagedFields(nil)
	return typed, nil
}
