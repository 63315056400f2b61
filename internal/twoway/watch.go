package twoway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/render"
)

// watchLookups watches what the render looked up: a change of one renders
// the release again.
func (r *Renders) watchLookups(key cache.ObjectName, rk v1alpha1.ReleaseKey, lookups []render.Lookup) {
	if len(lookups) == 0 {
		r.watches.Unwatch(renderWatchKey(key))
		return
	}
	targets := make([]engine.WatchTarget, 0, len(lookups))
	names := map[engine.WatchTarget]string{}
	for _, l := range lookups {
		t := engine.WatchTarget{GVR: l.GVR, Namespace: l.Namespace, Name: l.Name}
		targets = append(targets, t)
		names[t] = l.String()
	}
	r.watches.Watch(renderWatchKey(key), targets, func(t engine.WatchTarget) {
		r.renderAgain(key, "lookup of "+names[t]+" changed")
	})
}

// lookupWatchWait bounds how long a render waits to learn whether the
// locker may watch what the chart looked up.
const lookupWatchWait = 5 * time.Second

// unwatchable returns an error naming the first lookup whose type the
// locker may not watch (its RBAC refuses the list or watch, as the
// least-privilege chart's does for kinds it does not name): a change of it
// would never render the release again, so the report could never be
// trusted to be current. It waits up to lookupWatchWait for the types'
// informers to list.
func (r *Renders) unwatchable(ctx context.Context, lookups []render.Lookup) error {
	if len(lookups) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lookupWatchWait)
	defer cancel()
	for {
		unwatched := r.watches.Unwatched()
		pending := false
		for _, l := range lookups {
			if err := r.watches.WatchError(l.GVR); apierrors.IsForbidden(err) {
				return fmt.Errorf("the locker may not watch %s, so a change of the lookup of %s would never be seen, and the report may be stale: %v", l.GVR.GroupResource(), l, err)
			}
			pending = pending || slices.Contains(unwatched, l.GVR)
		}
		if !pending {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// recordRenderChanged says that the chart would render differently now
// (see renderState.announce for when).
func (r *Renders) recordRenderChanged(key cache.ObjectName, res *renderResult) {
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Namespace: key.Namespace, Name: key.Name}
	if hr, ok := r.locks.HelmRelease(key); ok {
		ref.UID = hr.UID
	}
	r.cfg.Recorder.Event(ref, corev1.EventTypeWarning, EventRenderChanged, truncate(res.cond.Message, maxEventMessage))
}

// clusterInfo is what the chart's .Capabilities say of the cluster: its
// version, and the group-versions and kinds it serves. known is unset
// until they are learned, and again when they may have changed while
// nothing rendered: they are then learned before the next render.
type clusterInfo struct {
	mu    sync.Mutex
	facts clusterFacts
	known bool
}

type clusterFacts struct {
	version     string
	apiVersions []string
}

// clusterFacts returns what .Capabilities says, learning it first if it
// is not known.
func (r *Renders) clusterFacts() (clusterFacts, error) {
	r.cluster.mu.Lock()
	defer r.cluster.mu.Unlock()
	if !r.cluster.known {
		facts, err := r.discoverCluster()
		if err != nil {
			return clusterFacts{}, err
		}
		r.cluster.facts, r.cluster.known = facts, true
	}
	return r.cluster.facts, nil
}

// ClusterMoved asks the renderer to learn the cluster's version and served
// APIs again: a CRD changed, or the watches reconnected, perhaps to an
// upgraded API server.
func (r *Renders) ClusterMoved() {
	select {
	case r.clusterCheck <- struct{}{}:
	default:
	}
}

// watchCluster learns the cluster's version and served APIs again on each
// ClusterMoved, and renders again the releases whose charts read what
// changed. While no release renders it asks the API server nothing: the
// facts are marked unknown, for the next render to learn.
func (r *Renders) watchCluster(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clusterCheck:
		}
		// Gather a burst of CRD events into one discovery.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		r.cluster.mu.Lock()
		was, known := r.cluster.facts, r.cluster.known
		if r.states.Len() == 0 {
			r.cluster.known = false
			known = false
		}
		r.cluster.mu.Unlock()
		if !known {
			continue
		}
		facts, err := r.discoverCluster()
		if err != nil {
			logger.Error(err, "Cannot learn the cluster's version and APIs for rendering charts; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			r.ClusterMoved()
			continue
		}
		r.cluster.mu.Lock()
		r.cluster.facts, r.cluster.known = facts, true
		r.cluster.mu.Unlock()
		r.renderForCluster(was, facts)
	}
}

// discoverCluster asks the API server its version and what it serves, as
// Helm does for .Capabilities.
func (r *Renders) discoverCluster() (clusterFacts, error) {
	d := r.cfg.Kube.Discovery()
	v, err := d.ServerVersion()
	if err != nil {
		return clusterFacts{}, fmt.Errorf("reading the API server's version: %w", err)
	}
	versions, err := action.GetVersionSet(d)
	if err != nil {
		return clusterFacts{}, fmt.Errorf("reading the API server's groups and kinds: %w", err)
	}
	return clusterFacts{version: v.GitVersion, apiVersions: versions}, nil
}

// renderForCluster renders again every release whose chart reads what
// changed between was and now.
func (r *Renders) renderForCluster(was, now clusterFacts) {
	var kube, apis []string
	if was.version != now.version {
		kube = append(kube, fmt.Sprintf("Kubernetes %s (was %s)", now.version, was.version))
	}
	apis = servedChanges(was.apiVersions, now.apiVersions)
	if len(kube) == 0 && len(apis) == 0 {
		return
	}
	r.states.Range(func(key cache.ObjectName, rs *renderState) {
		rs.mu.Lock()
		res := rs.result
		rs.mu.Unlock()
		if res == nil {
			return
		}
		if res.readsKubeVersion {
			for _, cause := range kube {
				r.renderAgain(key, cause)
			}
		}
		if res.readsAPIVersions {
			for _, cause := range apis {
				r.renderAgain(key, cause)
			}
		}
	})
}

// servedChanges says which group-versions are served now that were not,
// and which are no longer served.
func servedChanges(was, now []string) []string {
	gv := func(list []string) map[string]bool {
		out := map[string]bool{}
		for _, v := range list {
			// "g/v/Kind" and "v1/Kind" entries say the same as their
			// group-version's.
			last := v[strings.LastIndex(v, "/")+1:]
			if last == "" || unicode.IsUpper(rune(last[0])) {
				continue
			}
			out[v] = true
		}
		return out
	}
	before, after := gv(was), gv(now)
	var out []string
	for v := range after {
		if !before[v] {
			out = append(out, v+" is now served")
		}
	}
	for v := range before {
		if !after[v] {
			out = append(out, v+" is no longer served")
		}
	}
	slices.Sort(out)
	return out
}
