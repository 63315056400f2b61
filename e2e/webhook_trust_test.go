package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/e2e/framework"
	"github.com/helm-locker/helm-locker/internal/webhook"
)

// TestFailoverKeepsWebhookRules: with Prevent locks in place, the leader
// is stopped and its standby takes over with a new controller of its own.
// Its configuration loop starts before that controller has declared any
// lock (issue 31, item 5: the rules were written empty 64 ms after a
// restart, for a second). Watched the whole time, the configuration's
// rules are never empty and never drop the type only a ManifestLock holds,
// and every edit made from the moment the old leader has exited until the
// new one has synced is denied, of a HelmRelease's object and of the
// ManifestLock's.
//
// The new leader reads the ManifestLock's manifest through a proxy that
// holds that read back 3 s, as a backlog of locks does at scale: a leader
// that called itself synced before it had declared its ManifestLocks
// dropped their types from the rules, and let their objects' edits
// through, until its workers got to them.
//
// Both replicas answer at one address, as a Service's pods do, through a
// forwarder to whichever is up: the configuration need not change on a
// failover, so what the new leader writes is all that is seen.
func TestFailoverKeepsWebhookRules(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	const controller = "rules-failover"
	configName := controller + "." + registration
	t.Cleanup(func() {
		_ = env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), configName, metav1.DeleteOptions{})
	})
	addrs := []string{framework.FreeAddress(t), framework.FreeAddress(t)}
	url := "https://" + forwardToFirstUp(t, addrs) + webhook.Path
	proxy := env.StartProxy(t)
	start := func(i int) *controlplane.Process {
		args := []string{"--namespace", registration, "--controller-name", controller,
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
			"--webhook-bind-address=" + addrs[i], "--webhook-url=" + url}
		name := fmt.Sprintf("%s-%d", controller, i)
		launch := env.StartLocker
		if i == 1 {
			launch = func(name string, args ...string) (*framework.Locker, error) {
				return env.StartLockerWith(name, proxy.Kubeconfig(), args...)
			}
		}
		p, err := launch(name, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = p.Stop(10 * time.Second)
			if t.Failed() {
				t.Logf("%s", framework.LogTail(p, 30))
			}
		})
		return p
	}
	first := start(0)
	env.Eventually(t, 30*time.Second, func() error {
		if leaseHolder(t, registration, controller) == "" {
			return errors.New("no one leads")
		}
		return nil
	})
	leader := leaseHolder(t, registration, controller)
	second := start(1)
	framework.WaitForLog(t, second, waitingToLead, 30*time.Second)

	env.Helm(t, framework.Helm3, "install", "rules", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterWith(t, registration, ns, "rules", map[string]any{"mode": "Prevent"})
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	waitForConfigRules(t, configName, "configmaps")

	// A Prevent ManifestLock holds a type no HelmRelease holds: a Secret,
	// from a manifest kept in a ConfigMap. It names its controller, so
	// that the shared locker, which serves locks outside its own
	// registration namespace, leaves it alone.
	const source = "rules-manifest"
	if _, err := env.Kube.CoreV1().ConfigMaps(registration).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: source},
		Data: map[string]string{"lock.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: rules-locked\ndata:\n  key: ZGVjbGFyZWQ=\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ml := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mlv1.SchemeGroupVersion.String(), "kind": mlv1.Kind,
		"metadata": map[string]any{"name": "rules", "namespace": registration, "annotations": map[string]any{mlv1.ManagedByAnnotation: controller}},
		"spec": map[string]any{"namespace": ns, "mode": "Prevent",
			"manifestFrom": map[string]any{"configMapRef": map[string]any{"name": source, "key": "lock.yaml"}}},
	}}
	if _, err := env.Dynamic.Resource(mlv1.Resource).Namespace(registration).Create(t.Context(), ml, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitManifestLock(t, registration, "rules", mlv1.StateLocked)
	live := waitForConfigRules(t, configName, "secrets")

	edit := func(resource schema.GroupVersionResource, name, patch string) (bool, error) {
		_, err := env.Dynamic.Resource(resource).Namespace(ns).Patch(t.Context(), name, types.MergePatchType,
			[]byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return false, nil
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is locked by"):
			return true, nil
		default:
			return false, err
		}
	}
	edits := []struct {
		lock, resource, name, patch string
	}{
		{"HelmRelease", "configmaps", "rules-0", `{"data":{"key":"edited"}}`},
		{"ManifestLock", "secrets", "rules-locked", `{"data":{"key":"ZWRpdGVk"}}`},
	}
	editAll := func() (allowed []string) {
		for _, e := range edits {
			if denied, err := edit(schema.GroupVersionResource{Version: "v1", Resource: e.resource}, e.name, e.patch); !denied {
				allowed = append(allowed, fmt.Sprintf("%s's %s %s (err %v)", e.lock, e.resource, e.name, err))
			}
		}
		return allowed
	}
	env.Eventually(t, 30*time.Second, func() error {
		if allowed := editAll(); len(allowed) > 0 {
			return fmt.Errorf("edits of Prevent locks' objects were allowed before the failover: %v", allowed)
		}
		return nil
	})

	// Every version of the configuration from now on.
	w, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Watch(t.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", configName).String(), ResourceVersion: live.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var versions []string
	var emptied, dropped []string
	var watched sync.WaitGroup
	watched.Go(func() {
		for ev := range w.ResultChan() {
			cfg, ok := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			if !ok {
				continue
			}
			rules := preventRules(cfg)
			versions = append(versions, fmt.Sprintf("%s %s: %v", ev.Type, cfg.ResourceVersion, rules))
			if ev.Type == watch.Deleted || len(rules) == 0 {
				emptied = append(emptied, fmt.Sprintf("%s %s", ev.Type, cfg.ResourceVersion))
			}
			if !slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, "secrets") }) {
				dropped = append(dropped, fmt.Sprintf("%s %s", ev.Type, cfg.ResourceVersion))
			}
		}
	})

	proxy.DelayReads("/api/v1/namespaces/"+registration+"/configmaps/"+source, 3*time.Second)
	if err := first.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var answered, allowed atomic.Int64
	var firstAllowed atomic.Value
	done := make(chan struct{})
	var editing sync.WaitGroup
	editing.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			these := editAll()
			answered.Add(int64(len(edits)))
			if len(these) > 0 {
				allowed.Add(int64(len(these)))
				firstAllowed.CompareAndSwap(nil, fmt.Sprintf("%s after the stop: %v", time.Since(stopped).Round(time.Millisecond), these))
			}
		}
	})
	env.Eventually(t, 30*time.Second, func() error {
		if h := leaseHolder(t, registration, controller); h == "" || h == leader {
			return fmt.Errorf("the Lease is held by %q, want the second replica", h)
		}
		return nil
	})
	framework.WaitForLog(t, second, regexp.MustCompile(`"Initial syncs done"`), 60*time.Second)
	time.Sleep(time.Second)
	close(done)
	editing.Wait()
	w.Stop()
	watched.Wait()

	t.Logf("after the leader stopped: %d edits, %d allowed; configuration versions %v", answered.Load(), allowed.Load(), versions)
	if len(emptied) > 0 {
		t.Errorf("the webhook configuration's rules were empty in versions %v (every version: %v)", emptied, versions)
	}
	if len(dropped) > 0 {
		t.Errorf("the webhook configuration's rules dropped secrets, which only a Prevent ManifestLock holds, in versions %v (every version: %v)", dropped, versions)
	}
	if allowed.Load() > 0 {
		t.Errorf("%d of %d edits of Prevent locks' objects were allowed across the failover, the first %v", allowed.Load(), answered.Load(), firstAllowed.Load())
	}
}

// waitForConfigRules waits until the webhook configuration name sends
// resource to the webhook, and returns it.
func waitForConfigRules(t *testing.T, name, resource string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	var cfg *admissionregistrationv1.ValidatingWebhookConfiguration
	env.Eventually(t, 30*time.Second, func() error {
		var err error
		if cfg, err = env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			return err
		}
		if rules := preventRules(cfg); !strings.Contains(strings.Join(rules, ","), resource) {
			return fmt.Errorf("webhook configuration %s sends %v; want %s", name, rules, resource)
		}
		return nil
	})
	return cfg
}

// preventRules are the resources the configuration's Prevent webhook names.
func preventRules(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []string {
	var out []string
	for _, w := range cfg.Webhooks {
		if w.Name != webhook.PreventWebhook {
			continue
		}
		for _, r := range w.Rules {
			out = append(out, r.Resources...)
		}
	}
	return out
}

// forwardToFirstUp listens on a loopback address and forwards each
// connection to the first of addrs that accepts one, as a Service sends a
// connection to a pod that is up. The serving certificate names
// 127.0.0.1, so TLS passes through unchanged.
func forwardToFirstUp(t *testing.T, addrs []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Wait()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer in.Close()
				var out net.Conn
				for _, a := range addrs {
					if out, err = net.DialTimeout("tcp", a, time.Second); err == nil {
						break
					}
				}
				if out == nil {
					return
				}
				defer out.Close()
				go func() {
					_, _ = io.Copy(out, in)
					_ = out.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(in, out)
			})
		}
	}()
	return ln.Addr().String()
}

// TestForgedReviewOfUnheldObjectRecordsNothing POSTs forged
// AdmissionReviews straight at a locker's webhook, from a client that is
// not the API server (issue 31, item 6). One names an object no lock holds
// but carries the body of an object a Prevent lock holds, edited: it is
// allowed, and records nothing (no Denied event, no status.lastDenied, no
// denial counted), since the holder is looked up from the request's name
// before anything is decoded. One names the held object but carries
// another: it is allowed unjudged, records nothing, and is counted as
// shed for Mismatch. One names the held object and carries it: it is
// denied, as a real one would be, and recorded. What that one records is
// logged: a client that can reach the port can still forge a denial of a
// held object (see docs/trust.md's trust table; the chart's NetworkPolicy
// narrows who can reach it).
func TestForgedReviewOfUnheldObjectRecordsNothing(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	addr, metricsAddr := startWebhookLocker(t, "forged-review", registration)
	env.Helm(t, framework.Helm3, "install", "forged", framework.Chart(t, "configmaps"), "-n", ns)
	cr := env.RegisterWith(t, registration, ns, "forged", map[string]any{"mode": "Prevent"})
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)

	live, err := env.Dynamic.Resource(configMaps).Namespace(ns).Get(t.Context(), "forged-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forge := func(name string) []byte { return editReview(t, live, name, "someone-innocent") }
	post := func(review []byte) (bool, error) { return postReview(addr, review) }
	// The locker answers once it has synced: a forged review of the held
	// object is denied by then.
	env.Eventually(t, 30*time.Second, func() error {
		if allowed, err := post(forge("forged-0")); err != nil || allowed {
			return fmt.Errorf("a review of the held object was allowed (err %v): the locker has not synced", err)
		}
		return nil
	})
	recorded := func() (events int, lastDenied *v1alpha1.Denial, denials int) {
		for _, e := range env.Events(t, registration, cr) {
			if e.Reason == "Denied" {
				events++
			}
		}
		return events, env.HelmReleaseIn(t, registration, cr).Status.LastDenied,
			metric(t, metricsAddr, fmt.Sprintf(`helm_locker_admission_denied_total{kind="ConfigMap",namespace=%q,release="forged"}`, ns))
	}
	// What the held review above recorded is the baseline; wait until it
	// is all written.
	var baseEvents, baseDenials int
	var baseLast *v1alpha1.Denial
	env.Eventually(t, 10*time.Second, func() error {
		baseEvents, baseLast, baseDenials = recorded()
		if baseEvents == 0 || baseLast == nil || baseDenials == 0 {
			return fmt.Errorf("the held review's denial is not recorded yet: %d events, lastDenied %v, %d denials counted", baseEvents, baseLast, baseDenials)
		}
		return nil
	})
	time.Sleep(time.Second)
	baseEvents, baseLast, baseDenials = recorded()

	for i := range 20 {
		allowed, err := post(forge(fmt.Sprintf("not-held-%d", i)))
		if err != nil || !allowed {
			t.Fatalf("a forged review naming an object no lock holds: allowed %v, %v; want allowed", allowed, err)
		}
	}
	const mismatch = `helm_locker_admission_reviews_shed_total{reason="Mismatch"}`
	another := live.DeepCopy()
	another.SetName("not-held")
	if allowed, err := post(editReview(t, another, "forged-0", "someone-innocent")); err != nil || !allowed {
		t.Fatalf("a forged review naming the held object, carrying another: allowed %v, %v; want allowed unjudged", allowed, err)
	}
	if n := metric(t, metricsAddr, mismatch); n != 1 {
		t.Errorf("%s = %d after one forged review carrying another object than it names; want 1", mismatch, n)
	}
	env.Consistently(t, 3*time.Second, func() error {
		events, last, denials := recorded()
		if events != baseEvents || denials != baseDenials || !cmp.Equal(last, baseLast) {
			return fmt.Errorf("forged reviews of objects no lock holds were recorded: Denied events %d (before %d), denials counted %d (before %d), lastDenied %+v (before %+v)",
				events, baseEvents, denials, baseDenials, last, baseLast)
		}
		return nil
	})
	t.Logf("a forged review of the held object was denied and recorded as %+v: what a client that reaches the webhook's port can still do", baseLast)
}

// TestAdmissionProbeAnswered: the leader's probe, a dry-run create of a
// Lease sent through the real API server, comes back with the webhook's
// answer, so a Prevent lock says AdmissionAnswered=True and the probe's
// gauge is set; an Enforce lock carries no such condition.
func TestAdmissionProbeAnswered(t *testing.T) {
	t.Parallel()
	ns, registration := env.Namespace(t), env.Namespace(t)
	_, metricsAddr := startWebhookLocker(t, "admission-probe", registration)
	env.Helm(t, framework.Helm3, "install", "probed", framework.Chart(t, "configmaps"), "-n", ns)
	env.Helm(t, framework.Helm3, "install", "enforced", framework.Chart(t, "configmaps"), "-n", ns)
	prevent := env.RegisterWith(t, registration, ns, "probed", map[string]any{"mode": "Prevent"})
	enforce := env.RegisterIn(t, registration, ns, "enforced")
	env.WaitForStateIn(t, registration, enforce, v1alpha1.StateDeployed, 1)
	env.Eventually(t, 60*time.Second, func() error {
		c := findCondition(env.HelmReleaseIn(t, registration, prevent), v1alpha1.ConditionAdmissionAnswered)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonAdmissionAnswered {
			return fmt.Errorf("HelmRelease %s %s = %+v, want True/%s", prevent, v1alpha1.ConditionAdmissionAnswered, c, v1alpha1.ReasonAdmissionAnswered)
		}
		return nil
	})
	if c := findCondition(env.HelmReleaseIn(t, registration, enforce), v1alpha1.ConditionAdmissionAnswered); c != nil {
		t.Errorf("the Enforce lock %s says %+v; want no %s condition", enforce, c, v1alpha1.ConditionAdmissionAnswered)
	}
	_, body := framework.HTTPGet("http://" + metricsAddr + "/metrics")
	var answered float64
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "helm_locker_webhook_probe_answered_timestamp_seconds "); ok {
			answered, _ = strconv.ParseFloat(rest, 64)
		}
	}
	if at := time.Unix(int64(answered), 0); time.Since(at) > 5*time.Minute {
		t.Errorf("helm_locker_webhook_probe_answered_timestamp_seconds = %v; want within the last minutes", answered)
	}
}

// startWebhookLocker starts a locker of its own, named controller, serving
// the registration namespace and a webhook on a loopback address, and
// returns that address and its metrics' address. Cleanup stops it and
// deletes its webhook configuration.
func startWebhookLocker(t *testing.T, controller, registration string) (addr, metricsAddr string) {
	t.Helper()
	addr = framework.FreeAddress(t)
	locker, err := env.StartLocker(controller, "--namespace", registration, "--controller-name", controller, "--leader-elect=false",
		"--webhook-bind-address="+addr, "--webhook-url=https://"+addr+webhook.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = locker.Stop(10 * time.Second)
		_ = env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), controller+"."+registration, metav1.DeleteOptions{})
	})
	return addr, framework.ServedAddress(t, locker, "metrics")
}

// editReview is the review the API server would send of an update, by
// user, of ConfigMap name: live with its data.key edited. The name need
// not be live's: a forged review names what it likes.
func editReview(t *testing.T, live *unstructured.Unstructured, name, user string) []byte {
	t.Helper()
	edited := live.DeepCopy()
	edited.Object["data"].(map[string]any)["key"] = "edited"
	oldRaw, _ := live.MarshalJSON()
	newRaw, _ := edited.MarshalJSON()
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID("review-" + name), Operation: admissionv1.Update, Name: name, Namespace: live.GetNamespace(),
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, UserInfo: authenticationv1.UserInfo{Username: user},
			OldObject: runtime.RawExtension{Raw: oldRaw}, Object: runtime.RawExtension{Raw: newRaw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return review
}

// postReview sends review straight to the webhook at addr, as a client
// that is not the API server can, and returns whether it was allowed.
func postReview(addr string, review []byte) (bool, error) {
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Post("https://"+addr+webhook.Path, "application/json", bytes.NewReader(review))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
		return false, fmt.Errorf("status %d: %v", resp.StatusCode, err)
	}
	return out.Response.Allowed, nil
}
