package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
	"github.com/helm-locker/helm-locker/internal/webhook"
)

// admissionResult is what Prevent mode's webhook costs a write, against a
// webhook that allows everything at once, served from the same machine and
// measured in the same run, in turns.
type admissionResult struct {
	Releases, Objects int
	// NoOp is an update answered by the no-op webhook; Allowed one of a
	// Prevent-locked object that changes nothing held (an annotation);
	// Denied one that changes a held field.
	NoOp, Allowed, Denied distribution
	// OverheadP50Ms and OverheadP99Ms are Allowed less NoOp.
	OverheadP50Ms, OverheadP99Ms float64
	// UnlockedWrites were made to objects no lock could hold, and
	// UnlockedReviews of them reached the locker's webhook.
	UnlockedWrites, UnlockedReviews int
	// HeapEnforce and HeapPrevent are the locker's live heap with every
	// lock in Enforce mode, then in Prevent mode, in one process; the
	// difference, per locked object, is what Prevent mode costs.
	HeapEnforce, HeapPrevent int64
	PreventBytesPerObject    float64
}

// noopObjects are the ConfigMaps only the no-op webhook is sent.
const noopObjects = 25

// measureAdmission locks releases×objects ConfigMaps in Prevent mode and
// times updates through the locker's webhook against a no-op one.
func measureAdmission(ctx context.Context, tools controlplane.Tools, lockerBinary string, releases, objects, rounds int) (*admissionResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	env, stop, err := startEnv(ctx, cancel, tools)
	if err != nil {
		return nil, err
	}
	defer stop()
	kube, dyn := env.kube, env.dyn
	p := params{Releases: releases, Objects: objects}
	locked, err := setup(ctx, kube, dyn, p)
	if err != nil {
		return nil, err
	}
	addr, err := freeAddress()
	if err != nil {
		return nil, err
	}
	// The locker only updates its webhook configuration; the chart
	// creates it, and so does the bench.
	empty := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "helm-locker." + v1alpha1Namespace}}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, empty, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	l, err := startLocker(lockerBinary, env.cp.Kubeconfig, filepath.Join(env.dir, "locker.log"),
		"--webhook-bind-address="+addr, "--webhook-url=https://"+addr+webhook.Path)
	if err != nil {
		return nil, err
	}
	defer l.stop()
	// settled waits until every CR reports its spec locked, and the
	// webhook configuration names a type if prevent is set.
	settled := func(prevent bool) error {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := dyn.Resource(v1alpha1.Resource).Namespace(v1alpha1Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, item := range list.Items {
				state, _, _ := unstructured.NestedString(item.Object, "status", "state")
				observed, _, _ := unstructured.NestedInt64(item.Object, "status", "observedGeneration")
				if state != string(v1alpha1.StateDeployed) || observed != item.GetGeneration() {
					return false, nil
				}
			}
			if !prevent {
				return true, nil
			}
			cfg, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "helm-locker."+v1alpha1Namespace, metav1.GetOptions{})
			return err == nil && len(cfg.Webhooks) > 0 && len(cfg.Webhooks[0].Rules) > 0, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for the locks (Prevent %v): %w\n%s", prevent, err, tailFile(filepath.Join(env.dir, "locker.log")))
		}
		return nil
	}
	res := &admissionResult{Releases: releases, Objects: objects}
	if err := settled(false); err != nil {
		return nil, err
	}
	if res.HeapEnforce, err = l.heap(ctx, ""); err != nil {
		return nil, err
	}
	for name := range locked {
		if _, err := dyn.Resource(v1alpha1.Resource).Namespace(v1alpha1Namespace).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"mode":"Prevent"}}`), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	if err := settled(true); err != nil {
		return nil, err
	}
	if res.HeapPrevent, err = l.heap(ctx, ""); err != nil {
		return nil, err
	}
	res.PreventBytesPerObject = float64(res.HeapPrevent-res.HeapEnforce) / float64(releases*objects)

	noop, err := startNoopWebhook(ctx, kube)
	if err != nil {
		return nil, err
	}
	defer noop.Close()
	var refs []ref
	for _, rs := range locked {
		refs = append(refs, rs...)
	}
	patch := func(r ref, body string) (time.Duration, error) {
		start := time.Now()
		_, err := dyn.Resource(cmGVR).Namespace(r.ns).Patch(ctx, r.name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return time.Since(start), err
	}
	annotate := func(i int) string { return fmt.Sprintf(`{"metadata":{"annotations":{"bench":"%d"}}}`, i) }
	floor := func(i int) (time.Duration, bool, error) {
		d, err := patch(ref{ns: noopNamespace, name: fmt.Sprintf("noop-%d", i%noopObjects)}, annotate(i))
		return d, true, err
	}
	allowed := func(i int) (time.Duration, bool, error) {
		d, err := patch(refs[i%len(refs)], annotate(i))
		return d, true, err
	}
	denied := func(i int) (time.Duration, bool, error) {
		d, err := patch(refs[i%len(refs)], `{"data":{"key":"drifted"}}`)
		if !apierrors.IsForbidden(err) {
			return 0, false, fmt.Errorf("an update of a held field in Prevent mode: %v; want it denied", err)
		}
		return d, true, nil
	}
	if res.NoOp, res.Allowed, err = interleaved(rounds, 1, floor, allowed, nil); err != nil {
		return nil, err
	}
	if _, res.Denied, err = interleaved(rounds/2, 1, floor, denied, nil); err != nil {
		return nil, err
	}
	res.OverheadP50Ms = res.Allowed.P50 - res.NoOp.P50
	res.OverheadP99Ms = res.Allowed.P99 - res.NoOp.P99

	reviews := func() (float64, error) {
		return l.sum(ctx, "helm_locker_admission_reviews_total", func(string) bool { return true })
	}
	before, err := reviews()
	if err != nil {
		return nil, err
	}
	res.UnlockedWrites = 4 * noopObjects
	for i := range res.UnlockedWrites {
		if _, err := patch(ref{ns: noopNamespace, name: fmt.Sprintf("noop-%d", i%noopObjects)}, annotate(-i)); err != nil {
			return nil, err
		}
	}
	after, err := reviews()
	if err != nil {
		return nil, err
	}
	res.UnlockedReviews = int(after - before)
	return res, nil
}

// noopNamespace holds the objects only the no-op webhook is sent.
const noopNamespace = "noop"

// startNoopWebhook serves a webhook that allows everything, over TLS on
// loopback, and registers it for the ConfigMaps of noopNamespace.
func startNoopWebhook(ctx context.Context, kube kubernetes.Interface) (*http.Server, error) {
	var calls atomic.Int64
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: noopNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for i := range noopObjects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("noop-%d", i), Namespace: noopNamespace, Labels: map[string]string{"bench-noop": "true"}},
			Data: map[string]string{"key": payload(fmt.Sprint(i))}}
		if _, err := kube.CoreV1().ConfigMaps(noopNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	certs := &webhook.SecretCerts{Kube: kube, Namespace: noopNamespace, Name: "noop-webhook", Hosts: []string{"127.0.0.1"}}
	bundle, err := certs.Current(ctx)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{bundle.Cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
				http.Error(w, "no review", http.StatusBadRequest)
				return
			}
			review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
			review.Request = nil
			_ = json.NewEncoder(w).Encode(review)
		})}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	url := "https://" + ln.Addr().String() + "/"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-noop"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "noop.bench.helm-locker.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: bundle.CA},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"bench-noop": "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](webhook.Timeout),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		_ = srv.Close()
		return nil, err
	}
	// The API server reads configurations from a watch: wait until the
	// no-op webhook is called.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ConfigMaps(noopNamespace).Patch(ctx, "noop-0", types.MergePatchType, []byte(`{"metadata":{"annotations":{"bench":"ready"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && calls.Load() > 0, nil
	}); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("the no-op webhook is never called: %w", err)
	}
	return srv, nil
}

// admissionMarkdown reports r.
func admissionMarkdown(r *admissionResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Prevent mode: admission\n\n")
	fmt.Fprintf(&b, "%d releases × %d ConfigMaps in Prevent mode; every update timed from the client, %d of each, in turns with a no-op webhook on the same machine.\n\n", r.Releases, r.Objects, r.NoOp.Count)
	fmt.Fprintf(&b, "| update | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		d    distribution
	}{{"answered by the no-op webhook", r.NoOp}, {"of a locked object, allowed (an annotation)", r.Allowed}, {"of a locked object's held field, denied", r.Denied}} {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %.2f |\n", row.name, row.d.P50, row.d.P90, row.d.P99, row.d.Max)
	}
	fmt.Fprintf(&b, "\nAdmission adds %.2f ms at p50 and %.2f ms at p99 over the no-op webhook (target: ≤ 5 ms at p99). %d updates of objects no lock could hold reached the locker's webhook %d times.\n",
		r.OverheadP50Ms, r.OverheadP99Ms, r.UnlockedWrites, r.UnlockedReviews)
	fmt.Fprintf(&b, "\nLive heap with every lock in Enforce mode: %.1f MiB; in Prevent mode, same process: %.1f MiB: %+.0f B per locked object (one reading each, after a forced GC; at this size the difference is within the heap's own noise).\n",
		float64(r.HeapEnforce)/(1<<20), float64(r.HeapPrevent)/(1<<20), r.PreventBytesPerObject)
	return b.String()
}

func freeAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// runAdmission measures admission and writes its report into out.
func runAdmission(ctx context.Context, out, lockerBinary string) error {
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		return err
	}
	res, err := measureAdmission(ctx, tools, lockerBinary, 40, 50, 300)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	md := admissionMarkdown(res)
	fmt.Print(md)
	if err := writeJSON(filepath.Join(out, "admission.json"), res); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "admission.md"), []byte(md), 0o644)
}
