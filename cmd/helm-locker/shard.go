package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Shards split one registration namespace's CRs between lockers: each
// serves the CRs --watch-label-selector selects, and holds a Lease of its
// own. They share --controller-name, which the managed-by claim on a CR
// names, so that a CR relabelled into another shard is served there at
// once; the Lease name is what tells shards apart, and it names each
// shard's webhook configuration and certificate Secret too, so that they
// do not overwrite each other's.

// lease is the name of the Lease this locker's replicas compete for.
func (o *options) lease() string {
	if o.leaseName != "" {
		return o.leaseName
	}
	return o.controllerName
}

// served checks the flags that say which CRs this locker serves and what
// it names after its Lease, and returns the selector of its CRs.
func (o *options) served() (labels.Selector, error) {
	selector, err := labels.Parse(o.watchSelector)
	if err != nil {
		return nil, fmt.Errorf("--watch-label-selector %q: %w", o.watchSelector, err)
	}
	if o.leaseName != "" {
		if errs := validation.IsDNS1123Subdomain(o.leaseName); len(errs) > 0 {
			return nil, fmt.Errorf("--leader-elect-lease-name %q: %s", o.leaseName, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1035Label(o.webhookService); len(errs) > 0 {
		return nil, fmt.Errorf("--webhook-service %q: %s", o.webhookService, strings.Join(errs, "; "))
	}
	return selector, nil
}
