package e2e

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// These tests run two lockers with the default leader-election flags, as
// deploy/deployment.yaml does, and hold failover to its targets: a
// crashed leader's standby reverts a drift within 13.5 s of the crash, a
// stopped leader hands over within 2 s, and an idle leader sends at most
// 6 requests a minute.

// replica is one of two lockers sharing a Lease.
type replica struct {
	*framework.Locker
	identity string
	// metrics is the address of its /metrics; "" if not asked for.
	metrics string
}

var waitingToLead = regexp.MustCompile(`"Waiting to lead".*? identity="([^"]+)"`)

// startReplicas starts two lockers for registration, named controller,
// with only --namespace and --controller-name set (and, with metrics, a
// metrics address each) besides args, and returns them once each has said
// what identity it competes for the Lease with.
func startReplicas(t *testing.T, registration, controller string, metrics bool, args ...string) []*replica {
	t.Helper()
	var replicas []*replica
	for i := range 2 {
		r := &replica{}
		var err error
		if r.Locker, err = env.StartLocker(fmt.Sprintf("%s-%d", controller, i), append([]string{"--namespace", registration, "--controller-name", controller}, args...)...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop(10 * time.Second) })
		if metrics {
			r.metrics = framework.ServedAddress(t, r.Locker, "metrics")
		}
		replicas = append(replicas, r)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range replicas {
				t.Logf("--- log of %s ---\n%s", r.Name, framework.LogTail(r.Locker, 30))
			}
		}
	})
	for _, r := range replicas {
		r.identity = leaseIdentity(t, r.Locker)
	}
	return replicas
}

// leaseIdentity waits until l has logged the identity it competes for the
// Lease with, and returns it.
func leaseIdentity(t *testing.T, l *framework.Locker) string {
	t.Helper()
	return string(framework.WaitForLog(t, l, waitingToLead, 30*time.Second)[1])
}

// leaderOf waits until one of replicas holds the Lease and returns it
// first, the other second.
func leaderOf(t *testing.T, registration, controller string, replicas []*replica) (leader, standby *replica) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		holder := holderIdentity(leaseOf(t, registration, controller))
		for i, r := range replicas {
			if r.identity == holder {
				leader, standby = r, replicas[1-i]
				return nil
			}
		}
		return fmt.Errorf("the Lease %s/%s names %q, neither replica", registration, controller, holder)
	})
	return leader, standby
}

// leaseOf reads the Lease; nil if there is none yet.
func leaseOf(t *testing.T, registration, controller string) *coordinationv1.Lease {
	t.Helper()
	lease, err := env.Kube.CoordinationV1().Leases(registration).Get(t.Context(), controller, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading Lease %s/%s: %v", registration, controller, err)
	}
	return lease
}

func holderIdentity(lease *coordinationv1.Lease) string {
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// waitForRenewal returns as soon as the Lease's holder renews it.
func waitForRenewal(t *testing.T, registration, controller string) {
	t.Helper()
	lease := leaseOf(t, registration, controller)
	w, err := env.Kube.CoordinationV1().Leases(registration).Watch(t.Context(), metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", controller).String(),
		ResourceVersion: lease.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the Lease's watch ended")
			}
			if l, isLease := ev.Object.(*coordinationv1.Lease); ev.Type == watch.Modified && isLease &&
				holderIdentity(l) == holderIdentity(lease) && !l.Spec.RenewTime.Equal(lease.Spec.RenewTime) {
				return
			}
		case <-timeout:
			t.Fatalf("the Lease %s/%s was not renewed within 30 s", registration, controller)
		}
	}
}

// waitForIdleRenewal waits for a renewal that came a whole retry period
// (10 s) after the one before: the leader found its work idle at every
// look between them, and renews once a period from there while nothing
// changes.
func waitForIdleRenewal(t *testing.T, registration, controller string) {
	t.Helper()
	waitForRenewal(t, registration, controller)
	for range 6 {
		last := time.Now()
		waitForRenewal(t, registration, controller)
		if time.Since(last) >= 9*time.Second {
			return
		}
	}
	t.Fatalf("the leader of %s/%s renewed early six times in a row: its work is not idle", registration, controller)
}

// lockOneRelease installs the configmaps chart into ns, registers it and
// waits until the leader has locked it.
func lockOneRelease(t *testing.T, registration, ns string) {
	t.Helper()
	env.Helm(t, framework.Helm3, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterIn(t, registration, ns, "cms")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
}

// waitForRevert waits until data.key of ConfigMap cms-0 is back as
// declared, and returns when it saw it so.
func waitForRevert(t *testing.T, ns string) time.Time {
	t.Helper()
	env.Eventually(t, 60*time.Second, func() error {
		if got, _ := keyOf(t, ns, "cms-0"); got != "declared" {
			return fmt.Errorf("ConfigMap %s/cms-0 data.key = %q, want it reverted to %q", ns, got, "declared")
		}
		return nil
	})
	return time.Now()
}

// TestFailoverSIGKILL kills the leader the moment it has renewed the
// Lease, the worst case: its standby must wait the whole lease duration
// before it may take over, then start up and revert. That must take no
// more than 15 s from the kill, with 1.5 s to spare (failoverBound).
func TestFailoverSIGKILL(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	const controller = "failover-kill"
	// At --v=6 the lockers log their requests, and the test reads the
	// new leader's.
	leader, standby := leaderOf(t, registration, controller, startReplicas(t, registration, controller, false, "--v=6"))
	lockOneRelease(t, registration, ns)
	framework.WaitForLog(t, standby.Locker, configMapsListed, 30*time.Second)

	waitForRenewal(t, registration, controller)
	killed := time.Now()
	leader.Kill()
	setKey(t, ns, "cms-0", "edited after the leader crashed")
	reverted := waitForRevert(t, ns)
	// The standby saw cms-0 in line before the edit: once it leads, its
	// first check of it corrects it with the write alone, not a dry run
	// first (see engine.Engine.Standby).
	if n := dryRunsSincePromotion(t, standby.Locker, "cms-0"); n != 0 {
		t.Errorf("the new leader dry-ran its correction of cms-0 %d times, want none: the standby saw it in line", n)
	}

	lease := leaseOf(t, registration, controller)
	if holderIdentity(lease) != standby.identity {
		t.Errorf("the Lease names %q, want the standby %q", holderIdentity(lease), standby.identity)
	}
	took, fromLease := reverted.Sub(killed), reverted.Sub(lease.Spec.AcquireTime.Time)
	t.Logf("SIGKILL right after a renewal: the standby took the Lease %s and reverted the edit %s after the kill, %s from the Lease to the revert",
		lease.Spec.AcquireTime.Sub(killed).Round(time.Millisecond), took.Round(time.Millisecond), fromLease.Round(time.Millisecond))
	if took > failoverBound {
		t.Errorf("the edit was reverted %s after the leader was killed, want at most %s", took.Round(time.Millisecond), failoverBound)
	}
	if fromLease > newLeaderRevert {
		t.Errorf("the new leader reverted the edit %s after it took the Lease, want at most %s: its standby controller keeps its caches warm", fromLease.Round(time.Millisecond), newLeaderRevert)
	}
}

// configMapsListed is a locker's log of its ConfigMap informer's first
// list stored.
var configMapsListed = regexp.MustCompile(`"Caches populated".*type="/v1, Resource=configmaps"`)

// dryRunsSincePromotion counts the dry-run PATCHes of ConfigMap name that
// l logged at --v=6 since it was promoted to lead.
func dryRunsSincePromotion(t *testing.T, l *framework.Locker, name string) int {
	t.Helper()
	data, err := os.ReadFile(l.Log)
	if err != nil {
		t.Fatal(err)
	}
	_, after, found := strings.Cut(string(data), `"Promoted: leading`)
	if !found {
		t.Fatalf("%s did not log its promotion", l.Name)
	}
	return len(regexp.MustCompile(`verb="PATCH" url="[^"]*/configmaps/`+regexp.QuoteMeta(name)+`\?[^"]*dryRun=All`).FindAllString(after, -1))
}

// newLeaderRevert bounds the time from a standby taking the Lease to its
// revert of an edit made while no one led: it promotes the controller it
// ran while standing by, whose caches and declarations are warm.
const newLeaderRevert = time.Second

// failoverBound bounds the time from a leader's crash to its standby's
// revert: 15 s with 1.5 s to spare. The Lease is taken 12 s after the
// crash (--leader-elect-lease-duration), which leaves newLeaderRevert
// and half a second more.
const failoverBound = 13500 * time.Millisecond

// TestFailoverSIGTERM stops the leader as a rolling update does. It
// releases the Lease on its way out and the standby, which watches the
// Lease, takes it at once: the Lease must change hands within 2 s of the
// SIGTERM. The edit is made once the old leader has exited, so that only
// the new one can revert it; the new leader must first sync its caches,
// so the revert may take a little longer, up to 5 s from the SIGTERM.
func TestFailoverSIGTERM(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	const controller = "failover-term"
	leader, standby := leaderOf(t, registration, controller, startReplicas(t, registration, controller, false))
	lockOneRelease(t, registration, ns)

	stopped := time.Now()
	if err := leader.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()
	setKey(t, ns, "cms-0", "edited during the handover")
	reverted := waitForRevert(t, ns)

	lease := leaseOf(t, registration, controller)
	if holderIdentity(lease) != standby.identity {
		t.Fatalf("the Lease names %q, want the standby %q", holderIdentity(lease), standby.identity)
	}
	if log, _ := os.ReadFile(leader.Log); !strings.Contains(string(log), "Released the leader Lease") {
		t.Errorf("the old leader did not release the Lease on its way out")
	}
	handover, took := lease.Spec.AcquireTime.Sub(stopped), reverted.Sub(stopped)
	t.Logf("SIGTERM: the old leader exited after %s, the standby took the Lease after %s and reverted the edit after %s",
		exited.Sub(stopped).Round(time.Millisecond), handover.Round(time.Millisecond), took.Round(time.Millisecond))
	if handover > 2*time.Second {
		t.Errorf("the Lease changed hands %s after SIGTERM, want at most 2 s", handover.Round(time.Millisecond))
	}
	if took > 5*time.Second {
		t.Errorf("the edit was reverted %s after SIGTERM, want at most 5 s", took.Round(time.Millisecond))
	}
}

// TestFailoverIdleRequests counts, from each locker's own
// rest_client_requests_total, what an idle leader and its standby send
// in 60 s once a release is locked. The leader renews the Lease every
// 10 s, 6 requests a minute, and must send nothing else; the standby
// watches the Lease and sends nothing.
//
// The window starts within a few minutes of startup, before client-go's
// reflectors first reopen their watches (after 5 to 10 minutes, one
// request per informer); see docs/operating.md.
func TestFailoverIdleRequests(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	const controller = "failover-idle"
	leader, standby := leaderOf(t, registration, controller, startReplicas(t, registration, controller, true))
	lockOneRelease(t, registration, ns)

	// Start halfway between two renewals of an idle leader, so that the
	// window holds exactly the renewals that fall inside it: after the
	// lock's last writes (status and events, within 2 s of the lock), a
	// leader still renews from half its period on for a period (see
	// leader.Config.Busy).
	waitForIdleRenewal(t, registration, controller)
	time.Sleep(5 * time.Second)
	leaderBefore, standbyBefore := requestCounts(t, leader.metrics), requestCounts(t, standby.metrics)
	const window = 60 * time.Second
	time.Sleep(window)
	leaderSent, leaderTotal := countsSince(leaderBefore, requestCounts(t, leader.metrics))
	standbySent, standbyTotal := countsSince(standbyBefore, requestCounts(t, standby.metrics))

	t.Logf("idle for %s: the leader sent %d requests (%s), the standby %d (%s)", window, leaderTotal, leaderSent, standbyTotal, standbySent)
	if leaderTotal > 6 {
		t.Errorf("the idle leader sent %d requests in a minute (%s), want at most 6", leaderTotal, leaderSent)
	}
	if standbyTotal > 0 {
		t.Errorf("the idle standby sent %d requests in a minute (%s), want none: it watches the Lease", standbyTotal, standbySent)
	}
}

// requestCounts reads rest_client_requests_total from a locker's /metrics,
// by method and code.
func requestCounts(t *testing.T, addr string) map[string]int {
	t.Helper()
	code, body := framework.HTTPGet("http://" + addr + "/metrics")
	if code != 200 {
		t.Fatalf("GET %s/metrics: %d %s", addr, code, body)
	}
	counts := map[string]int{}
	labels := regexp.MustCompile(`(code|method)="([^"]*)"`)
	for _, line := range strings.Split(body, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(series, "rest_client_requests_total{") {
			continue
		}
		var method, code string
		for _, m := range labels.FindAllStringSubmatch(series, -1) {
			if m[1] == "method" {
				method = m[2]
			} else {
				code = m[2]
			}
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		counts[method+" "+code] += int(n)
	}
	return counts
}

// countsSince returns what was sent between two readings of
// requestCounts, as text, and in all.
func countsSince(before, after map[string]int) (string, int) {
	var parts []string
	total := 0
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%d× %s", d, k))
			total += d
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none", 0
	}
	return strings.Join(parts, ", "), total
}
