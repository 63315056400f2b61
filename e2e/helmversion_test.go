package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/manifest"
)

// TestReadAsTheHelmThatWroteIt locks, with each helm CLI, a chart that
// Helm 3 and Helm 4 store and render differently (e2e/testdata/charts/
// helm-engines): harbor's configs, "|+" blocks that end in a blank line,
// last in their documents, which Helm 4 applies with the blank line and
// Helm 3 without; and jenkins' probes, a value null in values.yaml that
// Helm 3's engine writes as "null" and Helm 4's leaves out, with a
// checksum of them. Each release is read and rendered as the Helm that
// wrote it: locking a fresh install writes nothing and counts no drift,
// Report mode says it renders as stored, an edit goes back to the value
// Helm applied, and the CLI's next upgrade needs no --force.
func TestReadAsTheHelmThatWroteIt(t *testing.T) {
	t.Parallel()
	for _, v := range framework.HelmVersions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			ns := env.Namespace(t)
			env.Kubectl(t, "-n", ns, "create", "serviceaccount", "writer")
			env.Kubectl(t, "-n", ns, "create", "rolebinding", "writer", "--clusterrole=edit", "--serviceaccount="+ns+":writer")
			const release = "engines"
			chart := framework.Chart(t, "helm-engines")
			env.Helm(t, v, "install", release, chart, "-n", ns)
			objs := releaseObjects(t, v, ns, release)

			// What Helm applied, as the API server stores it.
			jobservice := corpusObject{kind: "ConfigMap", gvr: configMaps, namespace: ns, name: release + "-helm-engines-jobservice"}
			config := dataValue(t, jobservice, "config.yml")
			if keepsBlankLine := strings.HasSuffix(config, "\n\n"); keepsBlankLine != (v == framework.Helm4) {
				t.Fatalf("%v applied config.yml ending %q: the chart no longer shows how the two Helms differ", v, config[max(0, len(config)-20):])
			}
			controller := corpusObject{kind: "Deployment", gvr: deployments, namespace: ns, name: release + "-helm-engines-controller"}
			if _, set := probeField(t, controller, "initialDelaySeconds"); set {
				t.Fatalf("%v set initialDelaySeconds, which the chart leaves null", v)
			}

			// inspect says which Helm wrote the revision.
			writtenBy := map[framework.HelmVersion]string{
				framework.Helm3: "written by Helm 3 (no apply_method: client-side apply)",
				framework.Helm4: `written by Helm 4 (apply_method "ssa")`,
			}[v]
			if res := env.CLI(t, "", "inspect", "release", release, "-n", ns); res.Code != 0 || !strings.HasPrefix(res.Stdout, fmt.Sprintf("# release %s/%s revision 1: %s\n", ns, release, writtenBy)) {
				t.Errorf("inspect: exit %d, stderr %s; want the YAML to start with %q:\n%.300s", res.Code, res.Stderr, writtenBy, res.Stdout)
			}
			if res := env.CLI(t, "", "inspect", "release", release, "-n", ns, "-o", "json"); res.Code != 0 || !strings.Contains(res.Stderr, writtenBy) || !strings.HasPrefix(res.Stdout, "{") {
				t.Errorf("inspect -o json: exit %d, stderr %q; want it to say %q there, and JSON alone on stdout", res.Code, res.Stderr, writtenBy)
			}

			cr := env.RegisterWith(t, framework.RegistrationNamespace, ns, release, map[string]any{"serviceAccountName": "writer", "rerender": string(v1alpha1.RerenderReport)})
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 1)
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			if wrote := lockerWrote(t, objs); len(wrote) > 0 {
				t.Errorf("locking a fresh %v install wrote %v", v, wrote)
			}
			noDrift(t, cr, "after locking a fresh install")

			// Edits go back to what Helm applied.
			jobservice.patch(t, types.MergePatchType, `{"data":{"config.yml":"edited\n"}}`)
			controller.patch(t, types.StrategicMergePatchType, `{"spec":{"template":{"spec":{"containers":[{"name":"controller","livenessProbe":{"periodSeconds":99}}]}}}}`)
			env.Eventually(t, 10*time.Second, func() error {
				if got := dataValue(t, jobservice, "config.yml"); got != config {
					return fmt.Errorf("%s config.yml = %q, want %q as Helm applied it", jobservice, got, config)
				}
				if period, _ := probeField(t, controller, "periodSeconds"); period != 10 {
					return fmt.Errorf("%s livenessProbe.periodSeconds = %d, want 10 as Helm applied it", controller, period)
				}
				return nil
			})
			if delay, set := probeField(t, controller, "initialDelaySeconds"); set {
				t.Errorf("reverting %s set livenessProbe.initialDelaySeconds to %d, which Helm left unset", controller, delay)
			}
			if hr := env.HelmRelease(t, cr); findCondition(hr, v1alpha1.ConditionRendered).Reason != v1alpha1.ReasonRendersAsStored {
				t.Errorf("after the reverts, Rendered = %+v", findCondition(hr, v1alpha1.ConditionRendered))
			}

			// The CLI upgrades the locked release as it is, without
			// --force, and the new revision is locked and renders as
			// stored too.
			env.Helm(t, v, "upgrade", release, chart, "-n", ns, "--set", "logLevel=debug")
			env.WaitForState(t, cr, v1alpha1.StateDeployed, 2)
			if got := dataValue(t, jobservice, "config.yml"); !strings.Contains(got, "level: DEBUG") {
				t.Errorf("after helm upgrade, config.yml = %q, want the new log level", got)
			}
			env.Eventually(t, 30*time.Second, func() error {
				hr := env.HelmRelease(t, cr)
				c := findCondition(hr, v1alpha1.ConditionRendered)
				if hr.Status.Rerender == nil || hr.Status.Rerender.Revision != 2 || c == nil || c.Reason != v1alpha1.ReasonRendersAsStored {
					return fmt.Errorf("after helm upgrade, Rendered = %+v, status.rerender = %+v; want revision 2 rendered as stored", c, hr.Status.Rerender)
				}
				return nil
			})
		})
	}
}

// dataValue is data[key] of the live ConfigMap o.
func dataValue(t *testing.T, o corpusObject, key string) string {
	t.Helper()
	v, _, _ := unstructured.NestedString(o.get(t).Object, "data", key)
	return v
}

// probeField is field of the live livenessProbe of Deployment o's first
// container, and whether it is set.
func probeField(t *testing.T, o corpusObject, field string) (int64, bool) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(o.get(t).Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("%s has no containers", o)
	}
	value, set, _ := unstructured.NestedInt64(containers[0].(map[string]any), "livenessProbe", field)
	return value, set
}

// helmOf is the reading a helm CLI's releases take.
func helmOf(v framework.HelmVersion) manifest.Helm {
	if v == framework.Helm4 {
		return manifest.Helm4
	}
	return manifest.Helm3
}
