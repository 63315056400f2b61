package twoway

import (
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
)

// renderTarget is what a render renders: the verified revision the lock
// holds, as the identity the lock writes as.
type renderTarget struct {
	release  v1alpha1.ReleaseKey
	revision int
	// digest is the verified manifest's (see storage.Digest), and
	// chartDigest the verified chart and values' (see
	// storage.Release.ChartDigest): a Secret rewritten since is not
	// rendered.
	digest, chartDigest string
	// writer is the ServiceAccount, in the release namespace, that
	// lookups impersonate; "" for none.
	writer string
	mode   v1alpha1.Rerender
	// chartRef is the HelmRelease's spec.chartRef, its namespace set;
	// zero for none.
	chartRef v1alpha1.ChartReference
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
	// Renders.failedUpgrades, and in the status.
	upgraded string
	// throttledUntil is when the upgrade held back last is made (see
	// reportUpgrade).
	throttledUntil time.Time
	// chart is the chart source's artifact last read.
	chart heldChart
	// announced is what RenderChanged events said of late.
	announced announcements
}

// announcements are the causes RenderChanged events said of one revision
// that renders differently, each with when it was last said.
type announcements struct {
	revision int
	at       map[string]time.Time
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
	// retry, if set, is when to render again with no other cause: a
	// chart source's download failed.
	retry time.Duration
}

// Lock is what a lock's sync tells two-way locking of the lock.
type Lock struct {
	// Release is the release the lock holds, Mode its rerender policy
	// (see Renders.Mode), and Writer the ServiceAccount its writes
	// impersonate, "" for none.
	Release v1alpha1.ReleaseKey
	Mode    v1alpha1.Rerender
	Writer  string
	// Chart is the chart of the verified revision the lock trusts, nil
	// for none.
	Chart *v1alpha1.ChartRevision
	// ChartRef is the HelmRelease's spec.chartRef, its namespace set;
	// nil for none.
	ChartRef *v1alpha1.ChartReference
	// Holding says the lock holds its revision; Reconciling that it is
	// on its way to hold it again.
	Holding, Reconciling bool
}

// Report is what a lock writes of two-way locking into its status.
type Report struct {
	// Off says the lock renders nothing: the Rendered condition and
	// status.rerender are removed.
	Off bool
	// Rendered and Status are the last render's, when it rendered what
	// the lock trusts now; Status is nil otherwise.
	Rendered metav1.Condition
	Status   *v1alpha1.RenderStatus
	// Waiting says nothing is rendered until the lock holds a verified
	// revision: Rendered (Unknown) is written if no status.rerender is.
	Waiting bool
}

// Trust tells two-way locking what key's lock holds after a sync, and
// returns what the lock reports from the last render. A render is queued
// when the lock holds a verified revision that was not rendered yet:
// renders wait until the lock is in place.
func (r *Renders) Trust(key cache.ObjectName, l Lock) Report {
	if l.Mode == v1alpha1.RerenderOff {
		r.Forget(key)
		return Report{Off: true}
	}
	rs := r.states.GetOrCreate(key, func() *renderState { return &renderState{} })
	target := renderTarget{release: l.Release, writer: l.Writer, mode: l.Mode}
	if l.ChartRef != nil {
		target.chartRef = *l.ChartRef
	}
	// The verified revision's chart is rendered (the chart of the older
	// one it names, if Helm was never seen to apply it), even while the
	// lock holds a newer one that Helm was not seen to apply: only what
	// was verified is trusted to say what to look up, and as whom. It is
	// rendered once the lock has first settled, and for as long as the
	// lock is not open.
	chart := l.Chart
	rs.mu.Lock()
	held := chart != nil &&
		(l.Holding || l.Reconciling && rs.target.revision == chart.Revision && rs.target.digest == chart.ManifestDigest)
	if held {
		target.revision, target.digest, target.chartDigest = chart.Revision, chart.ManifestDigest, chart.ChartDigest
	}
	changed := rs.target != target
	unwatch := rs.target.chartRef != (v1alpha1.ChartReference{}) && target.chartRef == (v1alpha1.ChartReference{})
	if changed && held && rs.target.revision != target.revision {
		rs.causes = append(rs.causes, fmt.Sprintf("revision %d was deployed", target.revision))
	}
	rs.target = target
	current := rs.result != nil && rs.rendered == target
	var rep Report
	if current {
		rep.Rendered, rep.Status = rs.result.cond, rs.result.status.DeepCopy()
	}
	rs.mu.Unlock()
	if unwatch && r.cfg.Charts != nil {
		r.cfg.Charts.Unwatch(key)
	}
	if changed && held {
		r.queue.AddAfter(key, renderDelay)
	}
	if !current && !held {
		rep.Waiting = true
		rep.Rendered = metav1.Condition{Type: v1alpha1.ConditionRendered, Status: metav1.ConditionUnknown,
			Reason: v1alpha1.ReasonNotRendered, Message: "the chart is rendered again once the lock holds a verified revision"}
	}
	return rep
}

// Forget stops rendering key's release: its lock is gone, or renders
// nothing.
func (r *Renders) Forget(key cache.ObjectName) {
	// Every sync of a lock that renders nothing comes here: a read lock
	// answers it.
	if _, ok := r.states.Get(key); !ok {
		return
	}
	rs, ok := r.states.Delete(key)
	if !ok {
		return
	}
	r.watches.Unwatch(renderWatchKey(key))
	if r.cfg.Charts != nil {
		r.cfg.Charts.Unwatch(key)
	}
	rs.mu.Lock()
	rk := rs.target.release
	rs.mu.Unlock()
	r.cfg.Metrics.ForgetRender(rk.Namespace, rk.Name)
}

// renderWatchKey is the engine's key of the watches of key's lookups, as
// the controller names the lock.
func renderWatchKey(key cache.ObjectName) string {
	return "render " + v1alpha1.Kind + " " + key.String()
}

// renderAgain queues a render of key's release, for cause.
func (r *Renders) renderAgain(key cache.ObjectName, cause string) {
	rs, ok := r.states.Get(key)
	if !ok {
		return
	}
	rs.mu.Lock()
	if !slices.Contains(rs.causes, cause) {
		rs.causes = append(rs.causes, cause)
	}
	rs.mu.Unlock()
	r.queue.AddAfter(key, renderDelay)
}
