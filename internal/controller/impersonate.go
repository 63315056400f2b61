package controller

import (
	"errors"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

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

// writerFor returns the client that writes as ServiceAccount name in
// namespace, or nil (the engine's own client) when name is empty. The
// locker needs wide RBAC to hold what admins install; impersonating a
// narrower identity bounds what one tenant's lock can write to what that
// identity may write. Clients are kept per identity, so each keeps its
// connections.
func (c *Controller) writerFor(namespace, name string) (dynamic.Interface, error) {
	if name == "" {
		return nil, nil
	}
	if c.cfg.REST == nil {
		return nil, errors.New("impersonating a ServiceAccount needs the locker's REST config")
	}
	user := "system:serviceaccount:" + namespace + ":" + name
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
