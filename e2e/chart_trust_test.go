package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// forgedTemplate is a template a tenant writes into a release Secret's
// chart: it reads a Secret the tenant may not, through a lookup made as the
// lock's write identity, and would create an object named after its value.
const forgedTemplate = `{{- $s := lookup "v1" "Secret" .Release.Namespace "hunter" }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: forged-{{ $s.data.password | default "" | b64dec }}
data:
  owner: tenant
`

// forgeChart adds forgedTemplate to the chart of the stored release rel,
// and a value of the tenant's to its user values.
func forgeChart(rel map[string]any) {
	chart := rel["chart"].(map[string]any)
	templates, _ := chart["templates"].([]any)
	chart["templates"] = append(templates, map[string]any{"name": "templates/forged.yaml", "data": []byte(forgedTemplate)})
	rel["config"] = map[string]any{"settings": map[string]any{"defaultGreeting": "forged"}}
}

// forgeryShows reports whether s shows anything of the forged chart: the
// Secret value it read, the object it would create, or its template.
func forgeryShows(s string) bool {
	return strings.Contains(s, "hunter2") || strings.Contains(s, "forged-") || strings.Contains(s, "forged.yaml")
}

// noTraceOfForgery fails if anything shows the forged chart ran: the
// object it would create, the Secret value it read, in the CR's status or
// events, the locker's metrics, or `diff --rerender`.
func noTraceOfForgery(t *testing.T, ns, cr string) {
	t.Helper()
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "forged-hunter2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the forged chart's ConfigMap exists (or reading it failed: %v)", err)
	}
	hr := env.HelmRelease(t, cr)
	if s := fmt.Sprintf("%+v", hr.Status); forgeryShows(s) {
		t.Errorf("the status shows the forged chart: %s", s)
	}
	for _, e := range env.Events(t, framework.RegistrationNamespace, cr) {
		if forgeryShows(e.Message) {
			t.Errorf("event %s shows the forged chart: %s", e.Reason, e.Message)
		}
	}
	resp, err := http.Get("http://" + framework.ServedAddress(t, env.Locker, "metrics") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || forgeryShows(string(metrics)) {
		t.Errorf("the locker's metrics show the forged chart (or reading them failed: %v)", err)
	}
	res := env.CLI(t, "", "diff", "--rerender", "-n", ns, "app")
	if forgeryShows(res.Stdout + res.Stderr) {
		t.Errorf("diff --rerender shows the forged chart: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestForgedChartNeverRenders: a tenant who may only write Secrets in the
// release namespace forges the chart a lock would render. Rewritten in
// place under the verified revision's manifest, it is refused as
// UnverifiedChart; written as a new revision that restates the manifest
// in a form the live objects already match (verified with no write), its
// chart is never trusted: the last trusted one's is rendered, and nothing
// is upgraded from it.
func TestForgedChartNeverRenders(t *testing.T) {
	t.Parallel()
	prepare := func(t *testing.T, ns string) {
		setGreeting(t, ns, "hello")
		env.Kubectl(t, "-n", ns, "create", "secret", "generic", "hunter", "--from-literal=password=hunter2")
	}
	for _, tc := range []struct {
		v    framework.HelmVersion
		mode v1alpha1.Rerender
	}{{framework.Helm3, v1alpha1.RerenderReport}, {framework.Helm4, v1alpha1.RerenderUpgrade}} {
		t.Run("InPlace/"+string(tc.mode)+"/"+tc.v.String(), func(t *testing.T) {
			t.Parallel()
			ns, cr := twoWay(t, tc.v, tc.mode, func(ns string) { prepare(t, ns) })
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			forger := tenantAllowed(t, ns)
			secrets := forger.CoreV1().Secrets(ns)
			stored, err := secrets.Get(t.Context(), "sh.helm.release.v1.app.v1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rel := decodeRelease(t, stored.Data["release"])
			forgeChart(rel)
			stored.Data["release"] = encodeRelease(t, rel)
			if _, err := secrets.Update(t.Context(), stored, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			// A lookup target changes: the lock renders again.
			setGreeting(t, ns, "bonjour")
			waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonUnverifiedChart, "sh.helm.release.v1.app.v1", "revision 1 was verified with")
			noTraceOfForgery(t, ns, cr)
			if res := env.CLI(t, "", "diff", "--rerender", "-n", ns, "app"); res.Code != 2 || !strings.Contains(res.Stderr, "no longer holds the chart and values revision 1 was verified with") {
				t.Errorf("diff --rerender of the rewritten revision: exit %d, stderr %s; want 2, refusing it", res.Code, res.Stderr)
			}
			if got := releaseRevisions(t, ns, "app"); got != 1 {
				t.Errorf("%d revisions of the release, want 1: something upgraded from the forged chart", got)
			}
		})
	}
	for _, v := range framework.HelmVersions {
		t.Run("Restated/Upgrade/"+v.String(), func(t *testing.T) {
			t.Parallel()
			ns, cr := twoWay(t, v, v1alpha1.RerenderUpgrade, func(ns string) { prepare(t, ns) })
			waitRendered(t, cr, 30*time.Second, metav1.ConditionTrue, v1alpha1.ReasonRendersAsStored)
			forger := tenantAllowed(t, ns)
			// The forger plants revision 2 within the second of a
			// write of Helm's to an object it restates, which
			// managedFields, kept to the second, cannot order: a
			// tenant who watches the release Secrets plants right
			// after Helm's last write.
			sameSecondAsHelm(t, ns, "app-two-way")
			// Revision 2 states every object's namespace, which the
			// chart leaves to Helm: the live objects already match.
			forgeRelease(t, forger, ns, "app", 1, 2, func(rel map[string]any) {
				forgeChart(rel)
				rel["manifest"] = strings.ReplaceAll(rel["manifest"].(string), "\nmetadata:\n", "\nmetadata:\n  namespace: "+ns+"\n")
			})
			env.Eventually(t, 30*time.Second, func() error {
				v := env.HelmRelease(t, cr).Status.Verified
				if v == nil || v.Revision != 2 {
					return fmt.Errorf("status.verified = %+v, want revision 2, whose objects are all as live", v)
				}
				if v.Chart == nil || v.Chart.Revision != 1 {
					return fmt.Errorf("status.verified = %+v: revision 2's own chart is trusted, though Helm never applied it", v)
				}
				return nil
			})
			setGreeting(t, ns, "bonjour")
			// Revision 1's chart renders the change; the upgrade is
			// refused, since the latest revision is not the one whose
			// chart was rendered.
			hr := waitRendered(t, cr, 30*time.Second, metav1.ConditionFalse, v1alpha1.ReasonUpgradeFailed, "settings")
			if rr := hr.Status.Rerender; rr == nil || rr.Revision != 1 {
				t.Errorf("status.rerender = %+v, want revision 1's chart rendered", rr)
			}
			noTraceOfForgery(t, ns, cr)
			if got := releaseRevisions(t, ns, "app"); got != 2 {
				t.Errorf("%d revisions of the release, want the 2 there were: something upgraded from the forged chart", got)
			}
		})
	}
}

// sameSecondAsHelm writes ConfigMap ns/name as Helm's field manager,
// early in a second, so that what the caller writes next falls in that
// second too. It adds an annotation no manifest declares, which the lock
// leaves as it is.
func sameSecondAsHelm(t *testing.T, ns, name string) {
	t.Helper()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.helm-locker.io/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := env.Dynamic.Resource(configMaps).Namespace(ns).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
}

// tenantAllowed is tenant(t, ns, "tenant"), once RBAC's authorizer, which
// sees a new binding a moment after it is written, lets it read Secrets.
func tenantAllowed(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	forger := tenant(t, ns, "tenant")
	env.Eventually(t, 10*time.Second, func() error {
		_, err := forger.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
		return err
	})
	return forger
}

// releaseRevisions counts the release Secrets of release in ns.
func releaseRevisions(t *testing.T, ns, release string) int {
	t.Helper()
	list, err := env.Kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm,name=" + release})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		if s.Type == corev1.SecretType("helm.sh/release.v1") {
			n++
		}
	}
	return n
}
