package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// serviceAccount is the ServiceAccount whose identity the writes of hr's
// lock take: the CR's own, else the controller's default ("" for none).
func (c *Controller) serviceAccount(hr *v1alpha1.HelmRelease) string {
	if hr.Spec.ServiceAccountName != "" {
		return hr.Spec.ServiceAccountName
	}
	return c.cfg.DefaultServiceAccount
}

// impersonated is the user name of ServiceAccount name in namespace.
func impersonated(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// writerFor returns the client that writes as ServiceAccount name in
// namespace, or nil (the engine's own client) when name is empty. The
// locker needs wide RBAC to hold what admins install; impersonating a
// narrower identity bounds what one tenant's lock can write to what that
// identity may write. Clients are kept per identity, so each keeps its
// connections, until no lock names the identity (see pruneWriters).
func (c *Controller) writerFor(namespace, name string) (dynamic.Interface, error) {
	if name == "" {
		return nil, nil
	}
	if c.cfg.REST == nil {
		return nil, errors.New("impersonating a ServiceAccount needs the locker's REST config")
	}
	user := impersonated(namespace, name)
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	if w := c.writers[user]; w != nil {
		return w, nil
	}
	cfg := rest.CopyConfig(c.cfg.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	w, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client impersonating %s: %w", user, err)
	}
	c.writers[user] = w
	return w, nil
}

// writerOf is the identity a cached HelmRelease or ManifestLock writes
// as: "" for the locker's own, or for anything else.
func (c *Controller) writerOf(obj any) string {
	switch lk := obj.(type) {
	case *v1alpha1.HelmRelease:
		if sa := c.serviceAccount(lk); sa != "" {
			return impersonated(lk.Spec.Release.Namespace, sa)
		}
	case *mlv1.ManifestLock:
		if sa := c.manifestServiceAccount(lk); sa != "" {
			return impersonated(lk.Namespace, sa)
		}
	}
	return ""
}

// writersInUse are the identities the locks in the caches write as.
func (c *Controller) writersInUse() map[string]bool {
	inUse := map[string]bool{}
	for _, store := range []cache.Store{c.crs.GetIndexer(), c.locks.GetIndexer()} {
		for _, obj := range store.List() {
			if user := c.writerOf(obj); user != "" {
				inUse[user] = true
			}
		}
	}
	return inUse
}

// pruneWriters drops the clients of identities no HelmRelease or
// ManifestLock names any more: a tenant who creates locks naming ever new
// ServiceAccounts, or a cluster whose releases come and go, would
// otherwise grow the map for the life of the process. A lock syncs from
// the same caches, so a client in use is never dropped; one dropped while
// a set still writes with it keeps working for that set, and the set's
// next declaration builds its own. It returns how many it dropped.
func (c *Controller) pruneWriters() int {
	inUse := c.writersInUse()
	c.writersMu.Lock()
	defer c.writersMu.Unlock()
	dropped := 0
	for user := range c.writers {
		if !inUse[user] {
			delete(c.writers, user)
			dropped++
		}
	}
	return dropped
}

// writerSweepInterval is the least time between two sweeps of the
// writers (see sweepWriters): a burst of deletions costs one pass over
// the caches.
const writerSweepInterval = 10 * time.Second

// writersMayBeUnused asks for a sweep of the writers, once a lock is
// deleted. It never blocks: it runs on the informers' goroutines.
func (c *Controller) writersMayBeUnused() {
	select {
	case c.sweep <- struct{}{}:
	default:
	}
}

// writerMayBeUnused asks for a sweep of the writers when an update changes
// the identity a lock writes as: swept only on deletes, the writers of a
// tenant who keeps changing spec.serviceAccountName would grow for the life
// of the process. Other updates, such as status writes, ask nothing.
func (c *Controller) writerMayBeUnused(old, obj any) {
	if c.writerOf(old) != c.writerOf(obj) {
		c.writersMayBeUnused()
	}
}

// sweepWriters prunes the writers each time a lock is deleted or changes
// its writer, at most once per writerSweepInterval, until ctx is done.
func (c *Controller) sweepWriters(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.sweep:
		}
		c.pruneWriters()
		select {
		case <-ctx.Done():
			return
		case <-time.After(writerSweepInterval):
		}
	}
}
