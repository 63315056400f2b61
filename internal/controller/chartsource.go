package controller

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/tools/cache"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/twoway"
)

// A HelmRelease's spec.chartRef: the Flux source whose artifact is the
// release's chart, dependencies included, which two-way locking renders
// in place of the chart Helm stored (see twoway.Charts). The controller
// reads the source and downloads its artifact as it does a ManifestLock's
// sourceRef, and watches it by name (chartSources), telling two-way
// locking when it changes.

// twoWayCharts is two-way locking's reader of chart sources.
type twoWayCharts struct{ c *Controller }

var _ twoway.Charts = twoWayCharts{}

func (t twoWayCharts) Chart(ctx context.Context, key cache.ObjectName, ref v1alpha1.ChartReference, have string) (twoway.ChartArtifact, error) {
	c := t.c
	lk := helmReleaseKey(key.Namespace, key.Name)
	what := fmt.Sprintf("%s %s/%s", ref.Kind, ref.Namespace, ref.Name)
	a, err := c.readSource(ctx, c.chartSources, lk, ref.Kind, ref.Namespace, ref.Name)
	if err == nil && a.Digest == have {
		return twoway.ChartArtifact{Revision: a.Revision, Digest: a.Digest}, nil
	}
	var files map[string][]byte
	if err == nil {
		files, err = c.fetchArtifact(ctx, a)
	}
	var se *sourceError
	if errors.As(err, &se) {
		message := se.message
		if a.Revision != "" {
			message = fmt.Sprintf("%s, revision %s: %s", what, a.Revision, message)
		}
		// The reasons of a source are alike for both kinds of lock.
		return twoway.ChartArtifact{}, &twoway.ChartSourceError{Reason: se.reason, Message: message, Retry: se.retry}
	}
	if err != nil {
		return twoway.ChartArtifact{}, err
	}
	return twoway.ChartArtifact{Revision: a.Revision, Digest: a.Digest, Files: files}, nil
}

func (t twoWayCharts) Unwatch(key cache.ObjectName) {
	t.c.chartSources.watch(helmReleaseKey(key.Namespace, key.Name), nil)
}

// chartRefOf is hr's spec.chartRef with its namespace set, nil for none.
func chartRefOf(hr *v1alpha1.HelmRelease) *v1alpha1.ChartReference {
	ref := hr.Spec.ChartRef.DeepCopy()
	if ref != nil && ref.Namespace == "" {
		ref.Namespace = hr.Namespace
	}
	return ref
}
