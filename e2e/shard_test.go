package e2e

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// These tests run a registration namespace's CRs in shards, as the chart's
// shards value does: each shard's lockers serve the CRs labelled with its
// name (--watch-label-selector) and hold a Lease of their own
// (--leader-elect-lease-name); all share one controller name.

const shardLabel = "sharding.helm-locker.io/shard"

// shardReplica is one locker of one shard.
type shardReplica struct {
	*framework.Locker
	shard string
	// metrics is the address of its /metrics.
	metrics string
	// identity is what it competes for its shard's Lease with.
	identity string
}

// startShard starts a locker for registration that serves the CRs
// labelled shard under the Lease <controller>-<shard>, with metrics on an
// address of its own and args besides. replica tells the lockers of one
// shard apart in log names.
func startShard(t *testing.T, registration, controller, shard string, replica int, args ...string) *shardReplica {
	t.Helper()
	r := &shardReplica{shard: shard}
	args = append([]string{"--namespace", registration, "--controller-name", controller,
		"--watch-label-selector", shardLabel + "=" + shard, "--leader-elect-lease-name", controller + "-" + shard}, args...)
	var err error
	if r.Locker, err = env.StartLocker(fmt.Sprintf("%s-%s-%d", controller, shard, replica), args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", r.Name, framework.LogTail(r.Locker, 40))
		}
	})
	r.metrics = framework.ServedAddress(t, r.Locker, "metrics")
	r.identity = leaseIdentity(t, r.Locker)
	return r
}

// shardRelease is a release locked by a HelmRelease in a shard.
type shardRelease struct {
	ns, name, cr string
}

// configMap is the release's ConfigMap i, as the configmaps chart names it.
func (r shardRelease) configMap(i int) string { return fmt.Sprintf("%s-%d", r.name, i) }

// installInShard installs the configmaps chart as release into ns with v
// and helmArgs, and registers it with a HelmRelease labelled for shard.
func installInShard(t *testing.T, v framework.HelmVersion, registration, ns, release, shard string, spec map[string]any, helmArgs ...string) shardRelease {
	t.Helper()
	env.Helm(t, v, append([]string{"install", release, framework.Chart(t, "configmaps"), "-n", ns}, helmArgs...)...)
	r := shardRelease{ns: ns, name: release, cr: ns + "-" + release}
	fullSpec := map[string]any{"release": map[string]any{"name": release, "namespace": ns}}
	for k, v := range spec {
		fullSpec[k] = v
	}
	hr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
		"metadata": map[string]any{"name": r.cr, "namespace": registration, "labels": map[string]any{shardLabel: shard}},
		"spec":     fullSpec,
	}}
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(registration).Create(t.Context(), hr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating HelmRelease %s: %v", r.cr, err)
	}
	return r
}

// moveToShard relabels a CR of resource into shard.
func moveToShard(t *testing.T, registration, name, shard string, lock bool) {
	t.Helper()
	resource := v1alpha1.Resource
	if lock {
		resource = mlv1.Resource
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, shardLabel, shard)
	if _, err := env.Dynamic.Resource(resource).Namespace(registration).Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("moving %s %s to shard %s: %v", resource.Resource, name, shard, err)
	}
}

// metricsOf reads a locker's /metrics: each series, as printed with its
// labels, and its value.
func metricsOf(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := framework.HTTPGet("http://" + addr + "/metrics")
	if code != 200 {
		t.Fatalf("GET %s/metrics: %d %s", addr, code, body)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			values[series] = v
		}
	}
	return values
}

// lockedReleases waits until a locker's helm_locker_locked_releases is n.
func lockedReleases(t *testing.T, r *shardReplica, n int) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		if got := metricsOf(t, r.metrics)["helm_locker_locked_releases"]; got != float64(n) {
			return fmt.Errorf("shard %s (%s) counts %v locked releases, want %d", r.shard, r.Name, got, n)
		}
		return nil
	})
}

// writesSent counts the writes a locker has sent: POST, PATCH and DELETE.
// PUT is left out: a leader renews its Lease with one every retry period,
// and writes nothing else with it.
func writesSent(t *testing.T, r *shardReplica) int {
	t.Helper()
	n := 0
	for k, v := range requestCounts(t, r.metrics) {
		switch method, _, _ := strings.Cut(k, " "); method {
		case "POST", "PATCH", "DELETE":
			n += v
		}
	}
	return n
}

// quiet waits until a locker has sent no write for 3 s (its held-back
// status and events included) and returns how many it has sent.
func quiet(t *testing.T, r *shardReplica) int {
	t.Helper()
	last, since := writesSent(t, r), time.Now()
	env.Eventually(t, 60*time.Second, func() error {
		if n := writesSent(t, r); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) < 3*time.Second {
			return fmt.Errorf("%s is still writing: %d writes so far", r.Name, last)
		}
		return nil
	})
	return last
}

// revertedWithin edits the release's ConfigMap i and waits until it is
// back as declared; it returns how long that took.
func revertedWithin(t *testing.T, r shardRelease, i int, value string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	setKey(t, r.ns, r.configMap(i), value)
	env.Eventually(t, limit, func() error {
		if got, _ := keyOf(t, r.ns, r.configMap(i)); got != "declared" {
			return fmt.Errorf("ConfigMap %s/%s data.key = %q, want the edit %q reverted", r.ns, r.configMap(i), got, value)
		}
		return nil
	})
	return time.Since(start)
}

// TestShardsSplitReleases runs shards a and b over one registration
// namespace, with releases of both CLIs in each. Each shard locks its own
// releases only: it counts them alone, reverts their edits, writes
// nothing for the other's and never names them in its log. When shard a
// stops, its releases are left alone and shard b's stay locked.
func TestShardsSplitReleases(t *testing.T) {
	t.Parallel()
	registration, ns := env.Namespace(t), env.Namespace(t)
	const controller = "shards-split"
	shards := map[string]*shardReplica{}
	for _, s := range []string{"a", "b"} {
		shards[s] = startShard(t, registration, controller, s, 0)
	}
	releases := map[string][]shardRelease{}
	for _, v := range framework.HelmVersions {
		for _, s := range []string{"a", "b"} {
			releases[s] = append(releases[s], installInShard(t, v, registration, ns, s+"-"+v.String(), s, nil))
		}
	}
	for _, s := range []string{"a", "b"} {
		for _, r := range releases[s] {
			hr := env.WaitForStateIn(t, registration, r.cr, v1alpha1.StateDeployed, 1)
			if owner := hr.Annotations[v1alpha1.ManagedByAnnotation]; owner != controller {
				t.Errorf("HelmRelease %s is claimed by %q, want %q: shards share the controller name", r.cr, owner, controller)
			}
		}
		lockedReleases(t, shards[s], len(releases[s]))
	}

	// Each shard reverts its releases' edits, and sends nothing while the
	// other's are reverted.
	for s, other := range map[string]string{"a": "b", "b": "a"} {
		idle := quiet(t, shards[other])
		for _, r := range releases[s] {
			revertedWithin(t, r, 0, "edited in shard "+s, 30*time.Second)
			env.Eventually(t, 30*time.Second, func() error {
				if hr := env.HelmReleaseIn(t, registration, r.cr); hr.Status.DriftsCorrected != 1 {
					return fmt.Errorf("HelmRelease %s counts %d drifts corrected, want 1", r.cr, hr.Status.DriftsCorrected)
				}
				return nil
			})
			corrected := fmt.Sprintf(`helm_locker_drift_corrected_total{kind="ConfigMap",namespace=%q,release=%q}`, r.ns, r.name)
			if got := metricsOf(t, shards[s].metrics)[corrected]; got != 1 {
				t.Errorf("shard %s: %s = %v, want 1", s, corrected, got)
			}
			if got, ok := metricsOf(t, shards[other].metrics)[corrected]; ok {
				t.Errorf("shard %s counts shard %s's release: %s = %v", other, s, corrected, got)
			}
		}
		if n := writesSent(t, shards[other]); n != idle {
			t.Errorf("shard %s sent %d writes while shard %s reverted its releases' edits and wrote their status, want none", other, n-idle, s)
		}
	}
	for s, other := range map[string]string{"a": "b", "b": "a"} {
		log, _ := os.ReadFile(shards[s].Log)
		for _, r := range releases[other] {
			if strings.Contains(string(log), r.cr) {
				t.Errorf("shard %s's log names shard %s's HelmRelease %s", s, other, r.cr)
			}
		}
	}

	// Shard a stops: its releases are nobody's, shard b's stay locked.
	if err := shards["a"].Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range releases["a"] {
		editStays(t, r.ns, r.configMap(0), "edited with shard a stopped", "shard a is stopped, and shard b does not serve its CRs")
	}
	for _, r := range releases["b"] {
		revertedWithin(t, r, 0, "edited with shard a stopped", 30*time.Second)
	}
}

// TestShardFailover runs shard a with a leader and a standby beside shard
// b, and SIGKILLs shard a's leader right after it renews its Lease, the
// worst case: shard a's standby takes that Lease within the lease
// duration and reverts an edit, as one unsharded locker's standby does
// (TestFailoverSIGKILL); shard b keeps its Lease and reverts at once all
// along.
func TestShardFailover(t *testing.T) {
	t.Parallel()
	registration, ns := env.Namespace(t), env.Namespace(t)
	const controller = "shards-failover"
	leaseA, leaseB := controller+"-a", controller+"-b"
	replicasA := []*shardReplica{startShard(t, registration, controller, "a", 0), startShard(t, registration, controller, "a", 1)}
	b := startShard(t, registration, controller, "b", 0)
	var inA []shardRelease
	for _, v := range framework.HelmVersions {
		inA = append(inA, installInShard(t, v, registration, ns, "a-"+v.String(), "a", nil))
	}
	inB := installInShard(t, framework.Helm4, registration, ns, "b-helm4", "b", nil)
	for _, r := range slices.Concat(inA, []shardRelease{inB}) {
		env.WaitForStateIn(t, registration, r.cr, v1alpha1.StateDeployed, 1)
	}
	var leader, standby *shardReplica
	env.Eventually(t, 30*time.Second, func() error {
		holder := holderIdentity(leaseOf(t, registration, leaseA))
		for i, r := range replicasA {
			if r.identity == holder {
				leader, standby = r, replicasA[1-i]
				return nil
			}
		}
		return fmt.Errorf("the Lease %s/%s names %q, neither of shard a's lockers", registration, leaseA, holder)
	})
	if holder := holderIdentity(leaseOf(t, registration, leaseB)); holder != b.identity {
		t.Fatalf("the Lease %s/%s names %q, want shard b's locker %q", registration, leaseB, holder, b.identity)
	}

	waitForRenewal(t, registration, leaseA)
	killed := time.Now()
	leader.Kill()
	if took := revertedWithin(t, inB, 0, "edited while shard a fails over", 10*time.Second); took > 5*time.Second {
		t.Errorf("shard b reverted an edit %s after shard a's leader was killed, want it unaffected", took.Round(time.Millisecond))
	}
	for _, r := range inA {
		setKey(t, r.ns, r.configMap(0), "edited after shard a's leader crashed")
	}
	for _, r := range inA {
		env.Eventually(t, 60*time.Second, func() error {
			if got, _ := keyOf(t, r.ns, r.configMap(0)); got != "declared" {
				return fmt.Errorf("ConfigMap %s/%s data.key = %q, want it reverted by shard a's standby", r.ns, r.configMap(0), got)
			}
			return nil
		})
	}
	reverted := time.Now()

	lease := leaseOf(t, registration, leaseA)
	if holderIdentity(lease) != standby.identity {
		t.Errorf("the Lease %s names %q, want shard a's standby %q", leaseA, holderIdentity(lease), standby.identity)
	}
	if holder := holderIdentity(leaseOf(t, registration, leaseB)); holder != b.identity {
		t.Errorf("the Lease %s changed hands to %q during shard a's failover", leaseB, holder)
	}
	took, fromLease := reverted.Sub(killed), reverted.Sub(lease.Spec.AcquireTime.Time)
	t.Logf("shard a's leader SIGKILLed right after a renewal: its standby took the Lease %s and reverted its edits %s after the kill, %s from the Lease to the revert",
		lease.Spec.AcquireTime.Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond), fromLease.Round(time.Millisecond))
	if took > failoverBound {
		t.Errorf("shard a's edits were reverted %s after its leader was killed, want at most %s", took.Round(time.Millisecond), failoverBound)
	}
	if fromLease > newLeaderRevert {
		t.Errorf("shard a's new leader reverted its edits %s after it took the Lease, want at most %s", fromLease.Round(time.Millisecond), newLeaderRevert)
	}
	lockedReleases(t, standby, len(inA))
	lockedReleases(t, b, 1)
}

// TestShardMove relabels CRs, HelmReleases of both CLIs and a
// ManifestLock with spec.prune, from shard a to shard b. Edits made right
// before, during and right after the move are all reverted; the
// ManifestLock's objects all stay; once shard a has let go, it writes
// nothing more, while shard b reverts, counts and reports.
//
// The edits go round the locks' objects: more than 5 reverts of one
// object within a minute would be a fight, whose reverts back off.
func TestShardMove(t *testing.T) {
	t.Parallel()
	registration, ns := env.Namespace(t), env.Namespace(t)
	const controller = "shards-move"
	const objects = 5 // ConfigMaps per lock
	a := startShard(t, registration, controller, "a", 0)
	b := startShard(t, registration, controller, "b", 0)
	var moved []shardRelease
	for _, v := range framework.HelmVersions {
		moved = append(moved, installInShard(t, v, registration, ns, "mv-"+v.String(), "a", nil, "--set", fmt.Sprintf("count=%d", objects)))
	}
	const lock = "mv-lock"
	var manifest []string
	for i := range objects {
		manifest = append(manifest, configMapYAML(fmt.Sprintf("%s-%d", lock, i), "declared"))
	}
	ml := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": lock, "namespace": registration,
			"labels":      map[string]any{shardLabel: "a"},
			"annotations": map[string]any{mlv1.ManagedByAnnotation: controller}},
		"spec": map[string]any{"namespace": ns, "prune": true, "manifest": strings.Join(manifest, "---\n")},
	}}
	if _, err := env.Dynamic.Resource(mlv1.Resource).Namespace(registration).Create(t.Context(), ml, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range moved {
		env.WaitForStateIn(t, registration, r.cr, v1alpha1.StateDeployed, 1)
	}
	if got := inventoryNames(waitManifestLock(t, registration, lock, mlv1.StateLocked)); len(got) != objects {
		t.Fatalf("ManifestLock inventory %v, want the %d ConfigMaps it created", got, objects)
	}
	lockedReleases(t, a, len(moved))
	lockedReleases(t, b, 0)
	targets := append(slices.Clone(moved), shardRelease{ns: ns, name: lock})

	// The move, with an edit just before it and edits as fast as they
	// are reverted during and after it.
	for _, r := range targets {
		setKey(t, r.ns, r.configMap(0), "edited before the move")
	}
	for _, r := range moved {
		moveToShard(t, registration, r.cr, "b", false)
	}
	moveToShard(t, registration, lock, "b", true)
	const rounds = 2 * objects
	var slowest time.Duration
	for round := range rounds {
		for _, r := range targets {
			slowest = max(slowest, revertedWithin(t, r, round%objects, fmt.Sprintf("edited in round %d of the move", round), 30*time.Second))
		}
	}
	t.Logf("during and right after the move, the slowest of %d edits was reverted in %s", rounds*len(targets), slowest.Round(time.Millisecond))

	// Shard a has let go: from then on it writes nothing, shard b holds
	// and reports.
	lockedReleases(t, a, 0)
	lockedReleases(t, b, len(moved))
	before := quiet(t, a)
	counted := map[string]int64{}
	for _, r := range moved {
		counted[r.cr] = env.HelmReleaseIn(t, registration, r.cr).Status.DriftsCorrected
	}
	for i := range objects {
		for _, r := range targets {
			revertedWithin(t, r, i, "edited after the move", 30*time.Second)
		}
	}
	for _, r := range moved {
		env.Eventually(t, 30*time.Second, func() error {
			hr := env.HelmReleaseIn(t, registration, r.cr)
			if hr.Status.DriftsCorrected < counted[r.cr]+objects || hr.Status.State != v1alpha1.StateDeployed {
				return fmt.Errorf("HelmRelease %s: state %s, %d drifts corrected; want Deployed and at least %d, written by shard b",
					r.cr, hr.Status.State, hr.Status.DriftsCorrected, counted[r.cr]+objects)
			}
			return nil
		})
	}
	if n := writesSent(t, a); n != before {
		t.Errorf("shard a sent %d writes after the CRs left it, want none", n-before)
	}
	got := waitManifestLock(t, registration, lock, mlv1.StateLocked)
	if names := inventoryNames(got); len(names) != objects {
		t.Errorf("ManifestLock inventory after the move %v, want all %d ConfigMaps", names, objects)
	}
	for i := range objects {
		if _, ok := keyOf(t, ns, fmt.Sprintf("%s-%d", lock, i)); !ok {
			t.Errorf("ConfigMap %s/%s-%d is gone after its ManifestLock (spec.prune) moved shards", ns, lock, i)
		}
	}
}

// TestShardsAdmission runs two shards with Prevent mode's webhook: each
// keeps a ValidatingWebhookConfiguration named after its Lease, called at
// its own address, and neither rewrites the other's. An edit of either
// shard's release is denied, naming its HelmRelease.
func TestShardsAdmission(t *testing.T) {
	t.Parallel()
	registration, ns := env.Namespace(t), env.Namespace(t)
	const controller = "shards-admission"
	urls := map[string]string{}
	releases := map[string]shardRelease{}
	for i, s := range []string{"a", "b"} {
		addr := framework.FreeAddress(t)
		urls[s] = "https://" + addr + "/validate"
		startShard(t, registration, controller, s, 0, "--webhook-bind-address="+addr, "--webhook-url="+urls[s])
		releases[s] = installInShard(t, framework.HelmVersions[i], registration, ns, "prev-"+s, s, map[string]any{"mode": "Prevent"})
	}
	configs := map[string]string{}
	for s, r := range releases {
		env.WaitForStateIn(t, registration, r.cr, v1alpha1.StateDeployed, 1)
		name := controller + "-" + s + "." + registration
		env.Eventually(t, 30*time.Second, func() error {
			cfg, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			// Prevent's webhook, then the probe's.
			if len(cfg.Webhooks) != 2 || cfg.Webhooks[0].ClientConfig.URL == nil || *cfg.Webhooks[0].ClientConfig.URL != urls[s] || len(cfg.Webhooks[0].Rules) == 0 {
				return fmt.Errorf("webhook configuration %s: %+v, want shard %s's URL %s and rules", name, cfg.Webhooks, s, urls[s])
			}
			configs[s] = cfg.ResourceVersion
			return nil
		})
		if _, err := env.Kube.CoreV1().Secrets(registration).Get(t.Context(), controller+"-"+s+"-webhook", metav1.GetOptions{}); err != nil {
			t.Errorf("shard %s's webhook certificate Secret: %v", s, err)
		}
	}
	for s, r := range releases {
		denied(t, []string{"is locked by HelmRelease " + registration + "/" + r.cr}, "-n", r.ns, "patch", "configmap", r.configMap(0), "--type=merge", "-p", `{"data":{"key":"edited"}}`)
		if got, _ := keyOf(t, r.ns, r.configMap(0)); got != "declared" {
			t.Errorf("shard %s's ConfigMap data.key = %q after a denied edit, want declared", s, got)
		}
	}
	env.Consistently(t, 3*time.Second, func() error {
		for s, rv := range configs {
			name := controller + "-" + s + "." + registration
			cfg, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cfg.ResourceVersion != rv {
				return fmt.Errorf("webhook configuration %s was rewritten (resourceVersion %s, then %s)", name, rv, cfg.ResourceVersion)
			}
		}
		return nil
	})
}

// TestShardsChartRunWithLeastPrivilege installs the chart with shards a
// and b and runs each shard's locker as the chart's ServiceAccount with
// its Deployment's args (pods do not run here; see startChartLocker). The
// chart's RBAC must let each take and renew its own Lease and keep its
// own webhook configuration and certificate Secret, and each locks the
// release labelled for it.
func TestShardsChartRunWithLeastPrivilege(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	// Cluster-scoped names come from the release's, so it is unique.
	release := registration
	// The releases write as deployer, which the chart may impersonate
	// only once named.
	env.Helm(t, framework.Helm4, "install", release, operatorChart(t), "-n", registration, "--set", "shards={a,b},rbac.impersonate.serviceAccounts={deployer}")
	fullname := chartFullname(release)
	lockers := map[string]*framework.Locker{}
	for _, s := range []string{"a", "b"} {
		lockers[s] = runChartDeployment(t, registration, release+"-"+s, fullname+"-"+s, fullname)
	}

	ns := env.Namespace(t)
	env.Kubectl(t, "-n", ns, "create", "serviceaccount", "deployer")
	env.Kubectl(t, "-n", ns, "create", "role", "deployer", "--verb=get,list,watch,create,update,patch,delete", "--resource=configmaps")
	env.Kubectl(t, "-n", ns, "create", "rolebinding", "deployer", "--role=deployer", "--serviceaccount="+ns+":deployer")
	releases := map[string]shardRelease{}
	for i, s := range []string{"a", "b"} {
		releases[s] = installInShard(t, framework.HelmVersions[i], registration, ns, "chart-"+s, s, map[string]any{"serviceAccountName": "deployer"})
	}
	for s, r := range releases {
		env.WaitForStateIn(t, registration, r.cr, v1alpha1.StateDeployed, 1)
		revertedWithin(t, r, 0, "edited in shard "+s, 30*time.Second)
	}
	for _, s := range []string{"a", "b"} {
		// The chart's controller name, and the shard's Lease.
		lease := "helm-locker-" + s
		if leaseOf(t, registration, lease) == nil {
			t.Fatalf("no Lease %s/%s", registration, lease)
		}
		// Taking a new Lease is a create; a renewal is an update by name.
		waitForRenewal(t, registration, lease)
		env.Eventually(t, 30*time.Second, func() error {
			if _, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), lease+"."+registration, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("shard %s's webhook configuration: %w", s, err)
			}
			if _, err := env.Kube.CoreV1().Secrets(registration).Get(t.Context(), lease+"-webhook", metav1.GetOptions{}); err != nil {
				return fmt.Errorf("shard %s's webhook certificate: %w", s, err)
			}
			return nil
		})
	}
	for s, l := range lockers {
		log, _ := os.ReadFile(l.Log)
		if refused := regexp.MustCompile(`(?m)^.*(forbidden|cannot (list|watch|update|patch|create)) .*$`).FindAllString(string(log), 5); len(refused) > 0 {
			t.Errorf("shard %s's locker was refused with the chart's RBAC:\n%s", s, strings.Join(refused, "\n"))
		}
	}
}
