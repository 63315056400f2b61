package twoway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/sandbox"
	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// Render renders key's release again now, as a render worker does,
// reports what it found through the lock's next sync (Locks.Resync), and
// in Upgrade mode upgrades the release. It returns when to render it again
// (an upgrade held back), and an error when a read failed and a retry may
// succeed.
func (r *Renders) Render(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	rs, ok := r.states.Get(key)
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
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("helmRelease", key.String(), "release", target.release.Namespace+"/"+target.release.Name, "revision", target.revision))
	start := time.Now()
	res, rel, lookups, err := r.render(ctx, key, rs, target, causes, prev)
	if err != nil {
		// The API server failed a read: try again, causes and all.
		rs.mu.Lock()
		rs.causes = append(causes, rs.causes...)
		rs.mu.Unlock()
		return 0, err
	}
	r.cfg.Metrics.ObserveRender(target.release.Namespace, target.release.Name, renderOutcome(res), time.Since(start))
	if rel != nil {
		// A render that failed made no lookups it could name: the
		// ones it had are still what a change would show.
		r.watchLookups(key, target.release, lookups)
		if err := r.unwatchable(ctx, lookups); err != nil {
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
	decision := r.decideUpgrade(key, target, res, upgraded)
	r.reportUpgrade(key, rs, target, res, decision)
	announce := rs.announce(prev, res, r.cfg.Clock.Now())
	rs.mu.Unlock()
	if announce {
		r.recordRenderChanged(key, res)
	}
	again := r.upgradeAsDecided(ctx, key, rs, target, res, rel, decision)
	if res.retry > 0 && (again == 0 || res.retry < again) {
		again = res.retry
	}
	// The lock's sync writes what was found.
	r.locks.Resync(key)
	return again, nil
}

// reannounceAfter is how long a RenderChanged event keeps another of the
// same revision and cause back: client-go's recorder lets 25 Warning
// events on one object through, then one every 5 minutes.
const reannounceAfter = 5 * time.Minute

// maxAnnounced bounds the causes of one revision said within
// reannounceAfter: lookups that flap apart make a cause of each, and of
// each order they come together in.
const maxAnnounced = 8

// announce reports whether a RenderChanged event is to say res, a render
// after prev, and if so notes it; rs.mu is held. A lookup that flaps
// renders a new difference at each flip, or differs and renders as stored
// by turns; an event for each would spend the recorder's limit on the CR's
// Warning events in seconds and drop those that matter after them, such as
// UpgradeThrottled. So an event says a difference where there was none, or
// of another revision or cause, and a revision's cause again only after
// reannounceAfter, maxAnnounced of them at most meanwhile. The condition
// and status.rerender say each render.
func (rs *renderState) announce(prev, res *renderResult, now time.Time) bool {
	if !newlyStale(prev, res) {
		return false
	}
	a := &rs.announced
	if a.at == nil || a.revision != res.status.Revision {
		a.revision, a.at = res.status.Revision, map[string]time.Time{}
	}
	for cause, at := range a.at {
		if !now.Before(at.Add(reannounceAfter)) {
			delete(a.at, cause)
		}
	}
	if _, said := a.at[res.status.Cause]; said || len(a.at) >= maxAnnounced {
		return false
	}
	a.at[res.status.Cause] = now
	return true
}

// newlyStale reports whether res, a render after prev, differs where prev
// did not, or for another revision or cause.
func newlyStale(prev, res *renderResult) bool {
	return res.stale && (prev == nil || !prev.stale ||
		prev.status.Revision != res.status.Revision || prev.status.Cause != res.status.Cause)
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
func (r *Renders) render(ctx context.Context, key cache.ObjectName, rs *renderState, target renderTarget, causes []string, prev *renderResult) (*renderResult, *render.Release, []render.Lookup, error) {
	res := &renderResult{status: v1alpha1.RenderStatus{Revision: target.revision, Time: metav1.Now()}}
	failed := func(reason, message string) (*renderResult, *render.Release, []render.Lookup, error) {
		res.cond = condition(v1alpha1.ConditionRendered, false, reason, limit(message))
		return res, nil, nil, nil
	}
	rk := target.release
	rel, err := r.revision(ctx, key, rs, target, res)
	if err != nil || rel == nil {
		// What cannot be rendered is res's; a read that failed may
		// pass.
		return res, nil, nil, err
	}
	// A chart that declares a kubeVersion may fail to render on this
	// cluster's, and render on the next one's.
	res.readsKubeVersion = rel.KubeVersion != ""
	client, err := r.locks.Writer(rk.Namespace, target.writer)
	if err != nil {
		return failed(v1alpha1.ReasonRenderFailed, err.Error())
	}
	cluster, err := r.clusterFacts()
	if err != nil {
		return nil, nil, nil, err
	}
	env := render.Cluster{KubeVersion: cluster.version, APIVersions: cluster.apiVersions, Client: client, Mapper: r.cfg.Mapper}
	out, err := r.cfg.Renderer.Render(ctx, rel, env)
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
	changes, err := rel.Compare(out.Manifest, out.Manifest)
	if err == nil && len(changes) > 0 {
		// Rendered twice, what generates itself (randAlphaNum, genCA)
		// differs and is left out.
		again, againErr := r.cfg.Renderer.Render(ctx, rel, env)
		if againErr != nil {
			return renderFailed(res, target, " again", againErr)
		}
		changes, err = rel.Compare(out.Manifest, again.Manifest)
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
	res.status.Changes, res.status.MoreChanges = renderChanges(r.placed(changes, rk.Namespace))
	res.digest = digestOf(out.Manifest)
	// The CRD caps the cause at 1024 characters: a longer one would
	// fail the status write, and the lock's status with it.
	res.status.Cause = limitTo(renderCause(target.revision, causes, prev, declaredLookups(rel, out.Lookups)), v1alpha1.MaxRenderCause)
	res.cond = condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonClusterChanged,
		limit(fmt.Sprintf("%s: %s would change (helm-locker diff --rerender -n %s %s)", res.status.Cause, describeChanges(res.status.Changes, res.status.MoreChanges), rk.Namespace, rk.Name)))
	return res, rel, out.Lookups, nil
}

// revision reads target's revision whole, as render renders it: from its
// Secret, only if it still holds what was verified, and with its chart
// from spec.chartRef's source if the lock names one. It returns nil, with
// res's condition set, for what makes it impossible to render, and an
// error only for a read a retry may make.
func (r *Renders) revision(ctx context.Context, key cache.ObjectName, rs *renderState, target renderTarget, res *renderResult) (*render.Release, error) {
	failed := func(reason, message string) (*render.Release, error) {
		res.cond = condition(v1alpha1.ConditionRendered, false, reason, limit(message))
		return nil, nil
	}
	rk := target.release
	if target.writer == "" {
		return failed(v1alpha1.ReasonNoWriteIdentity, "the lock writes with the locker's own identity, which may read every object: a chart's lookups are never made with it. Name a ServiceAccount in spec.serviceAccountName, or start the locker with --default-service-account, to render the chart again")
	}
	name := storage.SecretName(rk.Name, target.revision)
	secret, err := r.cfg.Kube.CoreV1().Secrets(rk.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return failed(v1alpha1.ReasonRenderFailed, fmt.Sprintf("the Secret %s/%s of revision %d is gone", rk.Namespace, name, target.revision))
	}
	if err != nil {
		return nil, err
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
	if target.chartRef != (v1alpha1.ChartReference{}) {
		// The chart as its source has it, dependencies included, once
		// its own files are shown to be those verified.
		if r.cfg.Charts == nil {
			return failed(v1alpha1.ReasonRenderFailed, "spec.chartRef is set, and this locker reads no chart sources")
		}
		return r.withSourceChart(ctx, key, rs, target, rel, res)
	}
	return rel, nil
}

// renderFailed reports a render of target that failed with err (of the
// render again, with again " again"). A lookup its write identity may not
// make is Forbidden. A render stopped at its deadline or its memory cap
// names what it looked up before it was stopped, which may be what made
// it loop or grow; it is not tried again until something changes: the
// revision, the cluster, or an object the chart looks up (a failed render
// keeps the last render's watches, see Render).
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
func (r *Renders) placed(changes []render.Change, namespace string) []render.Change {
	for i, ch := range changes {
		if ch.Namespace != "" {
			continue
		}
		m, err := r.cfg.Mapper.RESTMapping(schema.GroupKind{Group: ch.Group, Kind: ch.Kind})
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
