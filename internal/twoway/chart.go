package twoway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
)

// Charts reads the chart a HelmRelease's spec.chartRef names, from its
// Flux source: the controller's, which reads and watches the sources.
type Charts interface {
	// Chart reads the artifact of ref (its namespace set) for key's
	// lock, and watches ref, so that ChartMoved is called when it
	// changes. have is the digest of the artifact the caller holds: if
	// it is still the source's, nothing is downloaded, and Files is nil.
	// What the source does not let be read now is a *ChartSourceError;
	// other errors are reads a retry may make.
	Chart(ctx context.Context, key cache.ObjectName, ref v1alpha1.ChartReference, have string) (ChartArtifact, error)
	// Unwatch stops watching key's chart source.
	Unwatch(key cache.ObjectName)
}

// ChartArtifact is a chart source's artifact: its revision and digest as
// the source's status gives them, and its files, verified against the
// digest.
type ChartArtifact struct {
	Revision, Digest string
	Files            map[string][]byte
}

// ChartSourceError is a chart source that cannot be read now, with the
// reason Rendered gives for it (one of the v1alpha1.ReasonChart...
// constants, or ReasonRenderForbidden).
type ChartSourceError struct {
	Reason, Message string
	// Retry says the cause may pass by itself, with no event to say so
	// (a download that failed): the chart is read again after a while.
	Retry bool
}

func (e *ChartSourceError) Error() string { return e.Message }

// chartRetry is how long after a download that failed the chart is read
// again.
const chartRetry = 30 * time.Second

// heldChart is the chart source's artifact a release was last rendered
// from, kept so that a render downloads it again only once it changed.
type heldChart struct {
	ref      v1alpha1.ChartReference
	artifact ChartArtifact
}

// ChartMoved says key's chart source changed: its release is rendered
// again, once it was rendered at all (the first render reads the source
// anyway).
func (r *Renders) ChartMoved(key cache.ObjectName) {
	rs, ok := r.states.Get(key)
	if !ok {
		return
	}
	rs.mu.Lock()
	ref, rendered := rs.target.chartRef, rs.result != nil
	rs.mu.Unlock()
	if rendered && ref != (v1alpha1.ChartReference{}) {
		r.renderAgain(key, fmt.Sprintf("%s %s/%s changed", ref.Kind, ref.Namespace, ref.Name))
	}
}

// withSourceChart returns rel rendering target's chart source, the result
// to report instead when it cannot (retry says to read the source again
// after chartRetry), or an error for a read a retry may make.
func (r *Renders) withSourceChart(ctx context.Context, key cache.ObjectName, rs *renderState, target renderTarget, rel *render.Release, res *renderResult) (*render.Release, error) {
	ref := target.chartRef
	what := fmt.Sprintf("%s %s/%s", ref.Kind, ref.Namespace, ref.Name)
	rs.mu.Lock()
	held := rs.chart
	rs.mu.Unlock()
	have := ""
	if held.ref == ref {
		have = held.artifact.Digest
	}
	a, err := r.cfg.Charts.Chart(ctx, key, ref, have)
	var se *ChartSourceError
	switch {
	case errors.As(err, &se):
		res.cond = condition(v1alpha1.ConditionRendered, false, se.Reason, limit(fmt.Sprintf("spec.chartRef: %s", se.Message)))
		if se.Retry {
			res.retry = chartRetry
		}
		return nil, nil
	case err != nil:
		return nil, err
	case a.Files == nil:
		a = held.artifact
	default:
		rs.mu.Lock()
		rs.chart = heldChart{ref: ref, artifact: a}
		rs.mu.Unlock()
	}
	res.status.ChartRevision = a.Revision
	withChart, err := rel.WithChart(a.Files)
	var (
		mismatch *render.ChartMismatchError
		invalid  *render.InvalidChartError
	)
	switch {
	case errors.As(err, &mismatch):
		res.cond = condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonChartMismatch,
			limit(fmt.Sprintf("spec.chartRef %s, revision %s: %v; nothing was rendered", what, a.Revision, err)))
		return nil, nil
	case errors.As(err, &invalid):
		res.cond = condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonInvalidChart,
			limit(fmt.Sprintf("spec.chartRef %s, revision %s: %v", what, a.Revision, err)))
		return nil, nil
	case err != nil:
		res.cond = condition(v1alpha1.ConditionRendered, false, v1alpha1.ReasonRenderFailed, limit(err.Error()))
		return nil, nil
	}
	return withChart, nil
}
