package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// declareAll declares the objects of every registered, deployed release,
// and of every ManifestLock, before the engine starts its informers. Each
// informer's first list then finds the objects it must keep whole already
// tracked, and the first sync of every lock reads them from the cache
// instead of one GET each. Once it returns, every lock in the CR caches
// has been declared once (see Synced).
//
// The engine resolves what each page of Secrets, or each batch of locks,
// declared before the next is read (Engine.Prepare). A manifest parsed
// whole takes several times what the engine keeps of it, and the parsed
// manifests of every release, held until the last was declared, were
// most of the start's heap: 119 MB live at 25,000 locked objects, against
// 34 MB once they were resolved. The heap keeps the spans of such a peak
// in use afterwards, wherever a long-lived object was made among them.
func (c *Controller) declareAll(ctx context.Context) {
	c.restoreFailedUpgrades()
	// The CRs the cache holds now are the start's to declare. Those that
	// come while their Secrets are listed (CRs applied together with the
	// locker) are arrivals: declared one by one here they cost a GET of
	// each release Secret, and gathered they cost a list a page.
	var keys []lockKey
	start, releases := map[lockKey]bool{}, map[string]bool{}
	for _, obj := range c.crs.GetStore().List() {
		if key, ok := keyOf(v1alpha1.Kind, obj); ok {
			keys = append(keys, key)
			start[key] = true
			release, _ := crReleaseIndex(obj)
			for _, r := range release {
				releases[r] = true
			}
		}
	}
	prepare := func() { c.engine.Prepare(ctx) }
	declared := c.declareDeployed(ctx, slices.Sorted(maps.Keys(releases)), func(key lockKey) bool { return start[key] }, prepare)
	var rest []lockKey
	for _, key := range keys {
		if !declared[key] {
			rest = append(rest, key)
		}
	}
	count := len(declared) + len(rest)
	// ManifestLocks too: the workers would declare them only after the
	// controller says it is synced, and until then a new leader's
	// webhook rules would lack the types only Prevent ManifestLocks hold,
	// and a standby would let their objects' edits through.
	locks := c.locks.GetStore().List()
	for _, obj := range locks {
		if key, ok := keyOf(mlv1.Kind, obj); ok {
			rest = append(rest, key)
		}
	}
	for batch := range slices.Chunk(rest, max(c.cfg.Workers, 1)) {
		c.declareKeys(ctx, batch)
		prepare()
	}
	klog.FromContext(ctx).V(2).Info("Declared the releases", "count", count, "manifestLocks", len(locks))
}

// declareDeployed declares the locks of releases (each "namespace/name")
// that take says to, from their deployed release Secrets listed a page
// at a time: most releases' latest revision is the deployed one, and a
// list costs a request per page rather than a GET per release, and holds
// one page at once. It returns the locks it declared; the others, whose
// Secrets the list did not return (or when it could not be made), are
// the caller's to declare one by one. each, if set, is called after each
// page is declared.
func (c *Controller) declareDeployed(ctx context.Context, releases []string, take func(lockKey) bool, each func()) map[lockKey]bool {
	declared := map[lockKey]bool{}
	err := c.listDeployed(ctx, releases, func(page []corev1.Secret) {
		var keys []lockKey
		var kept []string
		for i := range page {
			secret := &page[i]
			rk := v1alpha1.ReleaseKey{Namespace: secret.Namespace, Name: secret.Labels[storage.LabelName]}
			// Only the revision a lock reads now is worth keeping:
			// a deployed one may be older, or a CR gone meanwhile.
			crs, _ := c.crs.GetIndexer().ByIndex(byRelease, rk.Namespace+"/"+rk.Name)
			latest := c.latestSecret(rk)
			if len(crs) == 0 || latest == nil || latest.UID != secret.UID || latest.ResourceVersion != secret.ResourceVersion {
				continue
			}
			id := secret.Namespace + "/" + secret.Name
			c.prefetched.Store(id, secret)
			kept = append(kept, id)
			for _, obj := range crs {
				if key, ok := keyOf(v1alpha1.Kind, obj); ok && !declared[key] && take(key) {
					declared[key] = true
					keys = append(keys, key)
				}
			}
		}
		c.declareKeys(ctx, keys)
		for _, id := range kept {
			c.prefetched.Delete(id)
		}
		if each != nil {
			each()
		}
	})
	if err != nil {
		klog.FromContext(ctx).Info("Not listing the deployed release Secrets; reading them one by one", "reason", err.Error())
	}
	return declared
}

// startupPage is how many release Secrets declareAll holds in one page.
// The list is of whole Secrets, and anyone who may create Secrets in a
// release's namespace can label one as a deployed revision of it, up to
// the 1 MiB a Secret may hold: a page holds at most 16 MiB of them, and
// listDeployed holds startupListers+1 pages at once.
const startupPage = 16

// startupNames is how many release names one startup list selects, which
// keeps its label selector, in the request's URL, to a few kilobytes.
const startupNames = 100

// startupListers is how many startup lists are in flight at once. Most
// namespaces hold a release or a few, so a list is mostly a round trip;
// two hide each other's, and the API server's time for them is not added
// to the locker's.
const startupListers = 2

// listDeployed lists the deployed revisions of releases, registered ones,
// calling page with each page of them: it selects them by Helm's labels
// and the releases' names, namespace by namespace, as the metadata cache
// of release Secrets already told which to read. A list of every
// namespace reads every Secret of the cluster from storage, once for each
// hundred names; one of a namespace reads only that namespace's. The lists
// go on while page works, and fill each page across namespaces, so that a
// cluster of one release a namespace is declared startupPage at a time.
func (c *Controller) listDeployed(ctx context.Context, releases []string, page func([]corev1.Secret)) error {
	if wanted, listed := c.deployedCounts(releases); listed > 2*wanted+startupPage {
		return &plantedError{wanted: wanted, listed: listed}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lists := make(chan deployedList)
	pages := make(chan []corev1.Secret)
	var wg sync.WaitGroup
	for range startupListers {
		wg.Go(func() {
			if err := c.fillPages(ctx, lists, pages); err != nil {
				cancel(err)
			}
		})
	}
	go func() {
		defer close(lists)
		for _, l := range deployedLists(releases) {
			select {
			case lists <- l:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(pages)
	}()
	for p := range pages {
		page(p)
	}
	return context.Cause(ctx)
}

// fillPages makes the lists it is given, and sends what they return in
// pages of startupPage Secrets or fewer. A list asks for no more than the
// page has room for, so a page is never more than that; and a page is
// sent short rather than a namespace's list be split in two.
func (c *Controller) fillPages(ctx context.Context, lists <-chan deployedList, pages chan<- []corev1.Secret) error {
	var held []corev1.Secret
	send := func() bool {
		select {
		case pages <- held:
			held = nil
			return true
		case <-ctx.Done():
			return false
		}
	}
	for l := range lists {
		// A namespace's releases that fit the page whole are listed
		// with one request, not two.
		if len(held) > 0 && len(held)+l.names > startupPage && !send() {
			return nil
		}
		opts := metav1.ListOptions{LabelSelector: l.selector}
		for {
			opts.Limit = int64(startupPage - len(held))
			list, err := c.cfg.Kube.CoreV1().Secrets(l.namespace).List(ctx, opts)
			if err != nil {
				return fmt.Errorf("listing the deployed release Secrets of namespace %s: %w", l.namespace, err)
			}
			held = append(held, list.Items...)
			if len(held) >= startupPage && !send() {
				return nil
			}
			if opts.Continue = list.Continue; opts.Continue == "" {
				break
			}
		}
	}
	if len(held) > 0 {
		send()
	}
	return nil
}

// deployedCounts counts, in the metadata cache of release Secrets, the
// deployed ones the startup lists would select (those in a registered
// release's namespace that carry its name), and of those the latest
// revision of a registered release: what the lists are for.
func (c *Controller) deployedCounts(releases []string) (wanted, listed int) {
	registered := map[string]bool{}
	for _, r := range releases {
		registered[r] = true
	}
	for _, obj := range c.secrets.GetStore().List() {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok || !storage.Deployed(m.Labels[storage.LabelStatus]) || !registered[m.Namespace+"/"+m.Labels[storage.LabelName]] {
			continue
		}
		rk := v1alpha1.ReleaseKey{Namespace: m.Namespace, Name: m.Labels[storage.LabelName]}
		listed++
		if latest := c.latestSecret(rk); latest != nil && latest.UID == m.UID {
			wanted++
		}
	}
	return wanted, listed
}

// plantedError says the startup list would read mostly Secrets no lock
// reads: deployed revisions named as registered releases, in their
// namespaces, that are not their latest. Anyone who may create Secrets
// there can write those, up to 1 MiB each, so the releases are read one
// by one.
type plantedError struct{ wanted, listed int }

func (e *plantedError) Error() string {
	return fmt.Sprintf("%d deployed release Secrets carry the names of registered releases, and only %d of them are what their locks read", e.listed, e.wanted)
}

// deployedList is one startup list: the deployed release Secrets of a
// namespace that carry one of some names, of which there are names.
type deployedList struct {
	namespace, selector string
	names               int
}

// deployedLists are the startup lists of the deployed release Secrets of
// releases, each "namespace/name": for each namespace, one list of
// startupNames names at a time. A name that is no label value names no
// Secret Helm wrote, and is left out; so is a release of no namespace,
// whose list would be of every namespace.
func deployedLists(releases []string) []deployedList {
	names := map[string][]string{}
	seen := map[string]bool{}
	for _, r := range releases {
		ns, name, _ := strings.Cut(r, "/")
		if !seen[r] && len(validation.IsValidLabelValue(name)) == 0 && name != "" && ns != "" {
			seen[r] = true
			names[ns] = append(names[ns], name)
		}
	}
	var lists []deployedList
	for _, ns := range slices.Sorted(maps.Keys(names)) {
		slices.Sort(names[ns])
		for chunk := range slices.Chunk(names[ns], startupNames) {
			selector := storage.OwnedSelector + "," + storage.LabelStatus + "=deployed," + storage.LabelName + " in (" + strings.Join(chunk, ",") + ")"
			lists = append(lists, deployedList{namespace: ns, selector: selector, names: len(chunk)})
		}
	}
	return lists
}

// declareKeys declares the objects of the locks keys name, with the
// controller's workers.
func (c *Controller) declareKeys(ctx context.Context, keys []lockKey) {
	work := make(chan lockKey)
	var wg sync.WaitGroup
	for range min(c.cfg.Workers, len(keys)) {
		wg.Go(func() {
			for key := range work {
				err := recovered(ctx, key, func() error { return c.declare(ctx, key) })
				if err != nil {
					klog.FromContext(ctx).V(2).Info("Could not declare lock at startup; the first sync retries", "lock", key, "err", err)
				}
			}
		})
	}
	for _, key := range keys {
		work <- key
	}
	close(work)
	wg.Wait()
}

// declare declares the objects of the lock key names as the first step of
// its sync does, so that the sync finds them declared. What that step asks
// of the queue is left out: the sync that follows asks it again.
func (c *Controller) declare(ctx context.Context, key lockKey) error {
	if key.isManifestLock() {
		ml, st := c.observeManifestLock(ctx, key)
		if ml == nil {
			return nil
		}
		_, _, err := c.declareManifestLock(ctx, newManifestSync(key, ml, st, &result{}))
		return err
	}
	hr, st, ok := c.observe(ctx, key)
	if !ok {
		return nil
	}
	st.arrived = true
	// The first sync would claim it first thing. Claimed now, the API
	// server writes the claims while the locker parses manifests and
	// lists, rather than after, when every status write waits behind
	// them.
	if !c.readOnly.Load() {
		if err := c.claimIfFree(ctx, hr, st); err != nil {
			return err
		}
	}
	_, _, err := c.decide(ctx, c.newReleaseSync(key, hr, st, &result{}))
	return err
}
