package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/engine/worker"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/sandbox"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/lock"
	"github.com/helm-locker/helm-locker/manifest"
)

// EventRenderChanged is the event of a chart that renders differently now
// than its locked revision stores.
const EventRenderChanged = "RenderChanged"

// renderWorkers is how many releases are rendered again at once. Renders
// take CPU that reverts need, so they are few, and have their own queue:
// a render never waits in front of a revert.
const renderWorkers = 2

// renderStartLimit is how long after the controller starts the locker
// renders at the latest, even if some lock never settles.
const renderStartLimit = time.Minute

// renderDelay gathers the causes of a render that come together, such as
// every lookup target a `helm upgrade` of another release rewrites.
const renderDelay = 500 * time.Millisecond

// Renderer renders a revision's chart on a cluster, as render.Render
// does, wherever it runs it.
type Renderer interface {
	Render(ctx context.Context, rel *render.Release, c render.Cluster) (*render.Output, error)
}

// inProcess is the Renderer of a Config that names none.
type inProcess struct{}

func (inProcess) Render(ctx context.Context, rel *render.Release, c render.Cluster) (*render.Output, error) {
	return render.Render(ctx, rel, c)
}

// renderer is the Renderer renders run with.
func (c *Controller) renderer() Renderer {
	if c.cfg.Renderer != nil {
		return c.cfg.Renderer
	}
	return inProcess{}
}

// renderTarget is what a render renders: the verified revision the lock
// holds, as the identity the lock writes as.
type renderTarget struct {
	release  v1alpha1.ReleaseKey
	revision int
	// digest is the verified manifest's (see manifestDigest), and
	// chartDigest the verified chart and values' (see
	// storage.Release.ChartDigest): a Secret rewritten since is not
	// rendered.
	digest, chartDigest string
	// writer is the ServiceAccount, in the release namespace, that
	// lookups impersonate; "" for none.
	writer string
	mode   v1alpha1.Rerender
}

// renderState is what the renderer knows of one HelmRelease. The lock's
// sync sets the target; a render worker renders it and keeps the result,
// which the lock's sync writes into the status: the status has one writer.
type renderState struct {
	mu     sync.Mutex
	target renderTarget
	// causes are what happened since the last render, in words.
	causes []string
	// rendered is the target of the last render, result its finding
	// (nil before the first).
	rendered renderTarget
	result   *renderResult
	// upgraded is the render (by its digest) last upgraded to: one try
	// per cause. A try that failed is remembered per release, in
	// Controller.failedUpgrades, and in the status.
	upgraded string
	// throttledUntil is when the upgrade held back last is made (see
	// reportUpgrade).
	throttledUntil time.Time
}

// renderResult is what a render found.
type renderResult struct {
	status v1alpha1.RenderStatus
	cond   metav1.Condition
	// stale says the chart renders differently now; digest identifies
	// the render, and what differs.
	stale  bool
	digest string
	// reads say which of the cluster's capabilities the chart reads.
	readsAPIVersions, readsKubeVersion bool
}

// rerenderOf is the rerender policy of hr.
func (c *Controller) rerenderOf(hr *v1alpha1.HelmRelease) v1alpha1.Rerender {
	if hr.Spec.Rerender != "" {
		return hr.Spec.Rerender
	}
	if c.cfg.DefaultRerender != "" {
		return c.cfg.DefaultRerender
	}
	return v1alpha1.RerenderOff
}

// wantRender tells the renderer what key's lock holds after a sync, and
// sets the Rendered condition and status.rerender from the last render.
// A render is queued when the lock holds a verified revision that was not
// rendered yet: renders wait until the lock is in place.
func (c *Controller) wantRender(key lockKey, hr *v1alpha1.HelmRelease, st *releaseState, status *v1alpha1.HelmReleaseStatus) {
	mode := c.rerenderOf(hr)
	if mode == v1alpha1.RerenderOff {
		c.forgetRender(key)
		removeCondition(&status.Conditions, v1alpha1.ConditionRendered)
		status.Rerender = nil
		return
	}
	rs := c.renderStates.GetOrCreate(key, func() *renderState { return &renderState{} })
	target := renderTarget{release: hr.Spec.Release, writer: c.serviceAccount(hr), mode: mode}
	// The verified revision's chart is rendered (the chart of the older
	// one it names, if Helm was never seen to apply it), even while the
	// lock holds a newer one that Helm was not seen to apply: only what
	// was verified is trusted to say what to look up, and as whom. It is
	// rendered once the lock has first settled, and for as long as the
	// lock is not open.
	v := st.trust.verified
	var chart *v1alpha1.ChartRevision
	if v != nil && v.Release == hr.Spec.Release {
		chart = chartOf(v)
	}
	rs.mu.Lock()
	held := chart != nil &&
		(st.lock.Holding() || st.lock.Phase == lock.Reconciling && rs.target.revision == chart.Revision && rs.target.digest == chart.ManifestDigest)
	if held {
		target.revision, target.digest, target.chartDigest = chart.Revision, chart.ManifestDigest, chart.ChartDigest
	}
	changed := rs.target != target
	if changed && held && rs.target.revision != target.revision {
		rs.causes = append(rs.causes, fmt.Sprintf("revision %d was deployed", target.revision))
	}
	rs.target = target
	current := rs.result != nil && rs.rendered == target
	var cond metav1.Condition
	var rerender v1alpha1.RenderStatus
	if current {
		cond, rerender = rs.result.cond, *rs.result.status.DeepCopy()
	}
	rs.mu.Unlock()
	if changed && held {
		c.renders.AddAfter(key, renderDelay)
	}
	switch {
	case current:
		setConditions(&status.LockStatus, hr.Generation, cond)
		status.Rerender = &rerender
	case !held && status.Rerender == nil:
		setConditions(&status.LockStatus, hr.Generation, metav1.Condition{Type: v1alpha1.ConditionRendered, Status: metav1.ConditionUnknown,
			Reason: v1alpha1.ReasonNotRendered, Message: "the chart is rendered again once the lock holds a verified revision"})
	}
}

// forgetRender stops rendering key's release.
func (c *Controller) forgetRender(key lockKey) {
	// Every sync of a lock that renders nothing comes here: a read lock
	// answers it.
	if _, ok := c.renderStates.Get(key); !ok {
		return
	}
	rs, ok := c.renderStates.Delete(key)
	if !ok {
		return
	}
	c.engine.Unwatch(renderWatchKey(key))
	rs.mu.Lock()
	rk := rs.target.release
	rs.mu.Unlock()
	c.cfg.Metrics.ForgetRender(rk.Namespace, rk.Name)
}

func renderWatchKey(key lockKey) string { return "render " + key.String() }

func removeCondition(conds *[]metav1.Condition, typ string) {
	*conds = slices.DeleteFunc(*conds, func(c metav1.Condition) bool { return c.Type == typ })
}

// renderAgain queues a render of key's release, for cause.
func (c *Controller) renderAgain(key lockKey, cause string) {
	rs, ok := c.renderStates.Get(key)
	if !ok {
		return
	}
	rs.mu.Lock()
	if !slices.Contains(rs.causes, cause) {
		rs.causes = append(rs.causes, cause)
	}
	rs.mu.Unlock()
	c.renders.AddAfter(key, renderDelay)
}

// runRenders renders releases again until ctx is done, once a cold
// start's locks have settled, and learns the cluster's version and served
// APIs again whenever a CRD changes or the watches reconnect (see
// clusterMoved).
func (c *Controller) runRenders(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.watchCluster(ctx) })
	// Nothing renders before every HelmRelease's lock has settled (see
	// unsettled) and the queue is empty, or a minute has passed: locks
	// that never settle, or a queue that is never empty, must not keep
	// renders off for good.
	limit := time.Now().Add(renderStartLimit)
	for c.unsettled.Load() > 0 || c.queue.Len() > 0 {
		if time.Now().After(limit) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	worker.Run(ctx, c.renders, renderWorkers, c.renderKey)
}

// renderKey renders key's release again, reports what it found through
// the lock's next sync, and in Upgrade mode upgrades the release.
func (c *Controller) renderKey(ctx context.Context, key lockKey) (time.Duration, error) {
	rs, ok := c.renderStates.Get(key)
	if !ok {
		return 0, nil
	}
	rs.mu.Lock()
	target, causes, prev, upgraded := rs.target, rs.causes, rs.result, rs.upgraded
	rs.causes = nil
	rs.mu.Unlock()
	if target.revision == 0 || target.mode == v1alpha1.RerenderOff {
		return 0, nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("helmRelease", key.ObjectName.String(), "release", target.release.Namespace+"/"+target.release.Name, "revision", target.revision))
	start := time.Now()
	res, rel, lookups, err := c.render(ctx, target, causes, prev)
	if err != nil {
		// The API server failed a read: try again, causes and all.
		rs.mu.Lock()
		rs.causes = append(causes, rs.causes...)
		rs.mu.Unlock()
		return 0, err
	}
	c.cfg.Metrics.ObserveRender(target.release.Namespace, target.release.Name, renderOutcome(res), time.Since(start))
	if rel != nil {
		// A render that failed made no lookups it could name: the
		// ones it had are still what a change would show.
		c.watchLookups(key, target.release, lookups)
		if err := c.unwatchable(ctx, lookups); err != nil {
			res.cond = metav1.Condition{Type: v1alpha1.ConditionRendered, Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonWatchForbidden, Message: limit(err.Error())}
		}
	}

	rs.mu.Lock()
	if rs.target.revision != target.revision || rs.target.digest != target.digest {
		// The lock moved on meanwhile: its render is queued.
		rs.mu.Unlock()
		return 0, nil
	}
	rs.rendered, rs.result = target, res
	decision := c.decideUpgrade(key, target, res, upgraded)
	c.reportUpgrade(key, rs, target, res, decision)
	rs.mu.Unlock()
	if res.stale && (prev == nil || prev.digest != res.digest) {
		c.recordRenderChanged(key, res)
	}
	again := c.upgradeAsDecided(ctx, key, rs, target, res, rel, decision)
	// The lock's sync writes what was found.
	c.queue.Add(key)
	return again, nil
}

// renderOutcome is the metrics' result of a render.
func renderOutcome(res *renderResult) string {
	switch {
	case res.stale:
		return "Stale"
	case res.cond.Reason == v1alpha1.ReasonRendersAsStored:
		return "Current"
	case res.cond.Reason == v1alpha1.ReasonRenderForbidden:
		return "Forbidden"
	case res.cond.Reason == v1alpha1.ReasonNoWriteIdentity:
		return "NoWriteIdentity"
	}
	return "Failed"
}

// render renders target's revision against the cluster as it is now, and
// compares it with what the revision stores; it returns the revision read
// whole, for Upgrade mode, and what the chart looked up. It returns an
// error only when a read failed and a retry may succeed; what the chart or
// its revision make impossible is the result.
func (c *Controller) render(ctx context.Context, target renderTarget, causes []string, prev *renderResult) (*renderResult, *render.Release, []render.Lookup, error) {
	res := &renderResult{status: v1alpha1.RenderStatus{Revision: target.revision, Time: metav1.Now()}}
	failed := func(reason, message string) (*renderResult, *render.Release, []render.Lookup, error) {
		res.cond = condition(v1alpha1.ConditionRendered, false, reason, limit(message))
		return res, nil, nil, nil
	}
	rk := target.release
	if target.writer == "" {
		return failed(v1alpha1.ReasonNoWriteIdentity, "the lock writes with the locker's own identity, which may read every object: a chart's lookups are never made with it. Name a ServiceAccount in spec.serviceAccountName, or start the locker with --default-service-account, to render the chart again")
	}
	name := storage.SecretName(rk.Name, target.revision)
	secret, err := c.cfg.Kube.CoreV1().Secrets(rk.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return failed(v1alpha1.ReasonRenderFailed, fmt.Sprintf("the Secret %s/%s of revision %d is gone", rk.Namespace, name, target.revision))
	}
	if err != nil {
		return nil, nil, nil, err
	}
	// A tenant may write release Secrets: only the manifest, chart and
	// values that were verified are rendered.
	rel, err := render.Decode(secret, rk.Namespace, rk.Name, render.Trusted{Revision: target.revision, ManifestDigest: target.digest, ChartDigest: target.chartDigest})
	var untrusted *render.UntrustedError
	if errors.As(err, &untrusted) {
		return failed(v1alpha1.ReasonUnverifiedChart, err.Error())
	}
	if err != nil {
		return failed(v1alpha1.ReasonRenderFailed, err.Error())
	}
	// A chart that declares a kubeVersion may fail to render on this
	// cluster's, and render on the next one's.
	res.readsKubeVersion = rel.KubeVersion != ""
	client, err := c.writerFor(rk.Namespace, target.writer)
	if err != nil {
		return failed(v1alpha1.ReasonRenderFailed, err.Error())
	}
	cluster, err := c.clusterFacts()
	if err != nil {
		return nil, nil, nil, err
	}
	env := render.Cluster{KubeVersion: cluster.version, APIVersions: cluster.apiVersions, Client: client, Mapper: c.cfg.Mapper}
	out, err := c.renderer().Render(ctx, rel, env)
	if err != nil {
		return renderFailed(res, target, "", err)
	}
	res.readsAPIVersions, res.readsKubeVersion = out.ReadsAPIVersions, res.readsKubeVersion || out.ReadsKubeVersion
	for i, l := range out.Lookups {
		if i == v1alpha1.MaxRenderLookups {
			break
		}
		res.status.Lookups = append(res.status.Lookups, l.String())
	}
	changes, err := render.Compare(rel.Helm, rel.Manifest, out.Manifest, out.Manifest)
	if err == nil && len(changes) > 0 {
		// Rendered twice, what generates itself (randAlphaNum, genCA)
		// differs and is left out.
		again, againErr := c.renderer().Render(ctx, rel, env)
		if againErr != nil {
			return renderFailed(res, target, " again", againErr)
		}
		changes, err = render.Compare(rel.Helm, rel.Manifest, out.Manifest, again.Manifest)
	}
	if err != nil {
		return failed(v1alpha1.ReasonRenderFailed, fmt.Sprintf("comparing the render of revision %d with its manifest: %v", target.revision, err))
	}
	if len(changes) == 0 {
		res.cond = condition(v1alpha1.ConditionRendered, true, v1alpha1.ReasonRendersAsStored,
			fmt.Sprintf("revision %d renders as stored against the cluster as it is now", target.revision))
		return res, rel, out.Lookups, nil
	}
	res.stale = true
	res.status.Changes, res.status.MoreChanges = renderChanges(c.placed(changes, rk.Namespace))
	res.digest = digestOf(out.Manifest)
	// The CRD caps the cause at 1024 characters: a longer one would
	// fail the status write, and the lock's status with it.
	res.status.Cause = limitTo(renderCause(target.revision, causes, prev, declaredLookups(rel, out.Lookups)), v1alpha1.MaxRenderCause)
	res.cond = condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonClusterChanged,
		limit(fmt.Sprintf("%s: %s would change (helm-locker diff --rerender -n %s %s)", res.status.Cause, describeChanges(res.status.Changes, res.status.MoreChanges), rk.Namespace, rk.Name)))
	return res, rel, out.Lookups, nil
}

// renderFailed reports a render of target that failed with err (of the
// render again, with again " again"). A lookup its write identity may not
// make is Forbidden. A render stopped at its deadline or its memory cap
// names what it looked up before it was stopped, which may be what made
// it loop or grow; it is not tried again until something changes: the
// revision, the cluster, or an object the chart looks up (a failed render
// keeps the last render's watches, see renderKey).
func renderFailed(res *renderResult, target renderTarget, again string, err error) (*renderResult, *render.Release, []render.Lookup, error) {
	reason, message := v1alpha1.ReasonRenderFailed, fmt.Sprintf("rendering revision %d%s: %v", target.revision, again, err)
	var (
		lookupErr *render.LookupError
		timeout   *sandbox.TimeoutError
		tooLarge  *sandbox.TooLargeError
	)
	switch {
	case errors.As(err, &timeout):
		reason = v1alpha1.ReasonRenderTimeout
		message += " (--render-timeout)" + stoppedAfter(timeout.Lookups)
	case errors.As(err, &tooLarge):
		reason = v1alpha1.ReasonRenderTooLarge
		if !tooLarge.Output {
			message += " (--render-memory-limit)"
		}
		message += stoppedAfter(tooLarge.Lookups)
	case errors.As(err, &lookupErr) && apierrors.IsForbidden(lookupErr.Err):
		reason = v1alpha1.ReasonRenderForbidden
		message = fmt.Sprintf("lookup of %s is forbidden to %s; nothing was read", lookupErr.Lookup, impersonated(target.release.Namespace, target.writer))
	}
	res.cond = condition(v1alpha1.ConditionRendered, false, reason, limit(message))
	return res, nil, nil, nil
}

// stoppedAfter ends the message of a stopped render: what it looked up
// first, and when it renders again.
func stoppedAfter(lookups []render.Lookup) string {
	var s string
	if len(lookups) > 0 {
		names := make([]string, 0, min(len(lookups), v1alpha1.MaxRenderLookups))
		for _, l := range lookups[:min(len(lookups), v1alpha1.MaxRenderLookups)] {
			names = append(names, l.String())
		}
		s = ", after it looked up " + strings.Join(names, ", ")
	}
	return s + "; it is rendered again when the revision, the cluster or an object it looks up changes"
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// placed names each changed object in the namespace Helm applies it to:
// the release's, for a namespaced object whose manifest names none.
func (c *Controller) placed(changes []render.Change, namespace string) []render.Change {
	for i, ch := range changes {
		if ch.Namespace != "" {
			continue
		}
		m, err := c.cfg.Mapper.RESTMapping(schema.GroupKind{Group: ch.Group, Kind: ch.Kind})
		if err == nil && m.Scope.Name() == meta.RESTScopeNameNamespace {
			changes[i].Namespace = namespace
			changes[i].Object = ch.Kind + " " + namespace + "/" + ch.Name
		}
	}
	return changes
}

// renderChanges bounds what a render reports.
func renderChanges(changes []render.Change) ([]v1alpha1.RenderChange, int) {
	var out []v1alpha1.RenderChange
	for i, ch := range changes {
		if i == v1alpha1.MaxRenderChanges {
			return out, len(changes) - i
		}
		paths := ch.Paths
		if len(paths) > v1alpha1.MaxRenderPaths {
			paths = paths[:v1alpha1.MaxRenderPaths]
		}
		out = append(out, v1alpha1.RenderChange{Object: ch.Object, Paths: slices.Clone(paths), Added: ch.Added, Removed: ch.Removed})
	}
	return out, 0
}

// describeChanges names what would change, for the condition's message.
func describeChanges(changes []v1alpha1.RenderChange, more int) string {
	var parts []string
	for _, ch := range changes {
		switch {
		case ch.Added:
			parts = append(parts, ch.Object+" (added)")
		case ch.Removed:
			parts = append(parts, ch.Object+" (removed)")
		default:
			parts = append(parts, ch.Object+" at "+strings.Join(ch.Paths, ", "))
		}
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("%d more objects", more))
	}
	return strings.Join(parts, "; ")
}

// renderCause says why the chart renders differently: what happened since
// the last render, else what the last stale render said, else that the
// revision renders differently than when it was installed. A lookup of an
// object the release itself declares is named as such: a chart that
// generates a value at install and reuses it through a lookup of its own
// object renders differently once after install, as a real `helm upgrade
// --reuse-values` would, and a user must tell it from someone else's edit.
func renderCause(revision int, causes []string, prev *renderResult, own []string) string {
	cause := strings.Join(causes, "; ")
	switch {
	case len(causes) == 1 && strings.HasPrefix(causes[0], "revision "):
		cause = fmt.Sprintf("revision %d renders differently now than when Helm rendered it", revision)
	case cause == "" && prev != nil && prev.stale && prev.status.Cause != "":
		cause = prev.status.Cause
	case cause == "":
		cause = fmt.Sprintf("revision %d renders differently now than when Helm rendered it", revision)
	}
	if len(own) > 0 {
		cause += fmt.Sprintf(" (it looks up %s, which the release itself declares)", strings.Join(own, ", "))
	}
	return cause
}

// declaredLookups names the lookups of objects that rel's manifest
// declares, read as the Helm that wrote it stored it.
func declaredLookups(rel *render.Release, lookups []render.Lookup) []string {
	objs, err := manifest.ParseRelease(rel.Manifest, rel.Helm)
	if err != nil {
		return nil
	}
	var own []string
	for _, l := range lookups {
		if l.Name == "" {
			continue
		}
		for _, o := range objs {
			ns := o.GetNamespace()
			if ns == "" {
				ns = rel.Namespace
			}
			if o.GetKind() == l.Kind && o.GetName() == l.Name && (l.Namespace == "" || ns == l.Namespace) {
				own = append(own, l.String())
				break
			}
		}
	}
	return own
}

// watchLookups watches what the render looked up: a change of one renders
// the release again.
func (c *Controller) watchLookups(key lockKey, rk v1alpha1.ReleaseKey, lookups []render.Lookup) {
	if len(lookups) == 0 {
		c.engine.Unwatch(renderWatchKey(key))
		return
	}
	targets := make([]engine.WatchTarget, 0, len(lookups))
	names := map[engine.WatchTarget]string{}
	for _, l := range lookups {
		t := engine.WatchTarget{GVR: l.GVR, Namespace: l.Namespace, Name: l.Name}
		targets = append(targets, t)
		names[t] = l.String()
	}
	c.engine.Watch(renderWatchKey(key), targets, func(t engine.WatchTarget) {
		c.renderAgain(key, "lookup of "+names[t]+" changed")
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
func (c *Controller) unwatchable(ctx context.Context, lookups []render.Lookup) error {
	if len(lookups) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lookupWatchWait)
	defer cancel()
	for {
		unwatched := c.engine.Unwatched()
		pending := false
		for _, l := range lookups {
			if err := c.engine.WatchError(l.GVR); apierrors.IsForbidden(err) {
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

// recordRenderChanged says, once per render that differs, that the chart
// would render differently now.
func (c *Controller) recordRenderChanged(key lockKey, res *renderResult) {
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind, Namespace: key.Namespace, Name: key.Name}
	if obj, exists, err := c.crs.GetIndexer().GetByKey(key.ObjectName.String()); err == nil && exists {
		if hr, ok := obj.(*v1alpha1.HelmRelease); ok {
			ref = crRef(hr)
		}
	}
	c.cfg.Recorder.Event(ref, corev1.EventTypeWarning, EventRenderChanged, truncate(res.cond.Message, maxEventMessage))
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
func (c *Controller) clusterFacts() (clusterFacts, error) {
	c.cluster.mu.Lock()
	defer c.cluster.mu.Unlock()
	if !c.cluster.known {
		facts, err := c.discoverCluster()
		if err != nil {
			return clusterFacts{}, err
		}
		c.cluster.facts, c.cluster.known = facts, true
	}
	return c.cluster.facts, nil
}

// clusterMoved asks the renderer to learn the cluster's version and served
// APIs again: a CRD changed, or the watches reconnected, perhaps to an
// upgraded API server.
func (c *Controller) clusterMoved() {
	select {
	case c.clusterCheck <- struct{}{}:
	default:
	}
}

// watchCluster learns the cluster's version and served APIs again on each
// clusterMoved, and renders again the releases whose charts read what
// changed. While no release renders it asks the API server nothing: the
// facts are marked unknown, for the next render to learn.
func (c *Controller) watchCluster(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.clusterCheck:
		}
		// Gather a burst of CRD events into one discovery.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		c.cluster.mu.Lock()
		was, known := c.cluster.facts, c.cluster.known
		if c.renderStates.Len() == 0 {
			c.cluster.known = false
			known = false
		}
		c.cluster.mu.Unlock()
		if !known {
			continue
		}
		facts, err := c.discoverCluster()
		if err != nil {
			logger.Error(err, "Cannot learn the cluster's version and APIs for rendering charts; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			c.clusterMoved()
			continue
		}
		c.cluster.mu.Lock()
		c.cluster.facts, c.cluster.known = facts, true
		c.cluster.mu.Unlock()
		c.renderForCluster(was, facts)
	}
}

// discoverCluster asks the API server its version and what it serves, as
// Helm does for .Capabilities.
func (c *Controller) discoverCluster() (clusterFacts, error) {
	d := c.cfg.Kube.Discovery()
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
func (c *Controller) renderForCluster(was, now clusterFacts) {
	var kube, apis []string
	if was.version != now.version {
		kube = append(kube, fmt.Sprintf("Kubernetes %s (was %s)", now.version, was.version))
	}
	apis = servedChanges(was.apiVersions, now.apiVersions)
	if len(kube) == 0 && len(apis) == 0 {
		return
	}
	c.renderStates.Range(func(key lockKey, rs *renderState) {
		rs.mu.Lock()
		res := rs.result
		rs.mu.Unlock()
		if res == nil {
			return
		}
		if res.readsKubeVersion {
			for _, cause := range kube {
				c.renderAgain(key, cause)
			}
		}
		if res.readsAPIVersions {
			for _, cause := range apis {
				c.renderAgain(key, cause)
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

// newRenderQueue is the renderer's queue: its own, so that a render never
// waits in front of a revert.
func newRenderQueue(metrics workqueue.MetricsProvider) workqueue.TypedRateLimitingInterface[lockKey] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[lockKey](time.Second, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[lockKey]{Name: "renders", MetricsProvider: metrics})
}
