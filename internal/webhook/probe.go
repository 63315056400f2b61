package webhook

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/helm-locker/helm-locker/internal/admission"
)

// ProbeWebhook is the name of the webhook, in the configuration, that
// sends the probe to the webhook.
const ProbeWebhook = "probe.helm-locker.io"

// ProbeLabel marks the Lease a probe asks the API server to create, in a
// dry run: only that request matches the probe webhook.
const ProbeLabel = "helm-locker.io/admission-probe"

// ProbeEvery is how often the leader probes; ProbeRetry how soon it
// probes again after a probe was not answered, as at the start of a term,
// before the API server has read the probe webhook.
const (
	ProbeEvery = time.Minute
	ProbeRetry = 5 * time.Second
)

// BuildProbe returns the webhook that sends a dry-run create of a Lease
// labelled ProbeLabel in namespace to the webhook at client: the probe's
// request, and nothing else. It is called as the Prevent webhook is, so
// its answer says the API server reaches the webhook (the Service, the
// network, the caBundle); failurePolicy Ignore, so a probe that is not
// answered fails nothing.
func BuildProbe(client admissionregistrationv1.WebhookClientConfig, namespace string) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:         ProbeWebhook,
		ClientConfig: client,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{coordinationv1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{"leases"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		TimeoutSeconds:          ptr.To[int32](Timeout),
		AdmissionReviewVersions: []string{"v1"},
		NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: ProbeLabel, Operator: metav1.LabelSelectorOpExists}}},
		MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "dry-run", Expression: "request.dryRun == true"}},
	}
}

// ProbeObserver is told when a probe was answered, for metrics.
type ProbeObserver interface {
	ProbeAnswered(at time.Time)
}

// Probe tells whether the API server reaches the webhook. On an idle
// cluster no request comes at all, so the time since the last review says
// nothing; and anyone who can reach the port can send a review, so neither
// does a review. Every ProbeEvery the probe asks the API server to create a
// Lease in a dry run, which the probe webhook (BuildProbe) sends to the
// webhook; the webhook answers it with admission.ProbeWarning, and the API
// server hands that warning back with its answer to this very request. The
// warning on the response is the proof: nothing sent to the webhook's port
// can put it there.
type Probe struct {
	// Kube should not log warnings (rest.NoWarnings): the probe reads
	// one from each response.
	Kube kubernetes.Interface
	// Namespace and Name name the Lease created in a dry run.
	Namespace, Name string
	Observer        ProbeObserver
	Now             func() time.Time

	mu          sync.Mutex
	since, last time.Time
}

// Answered returns when a probe was last answered, zero if none was, and
// since when the probe has run, zero if it does not.
func (p *Probe) Answered() (last, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.since
}

// Run probes every ProbeEvery, or ProbeRetry after a probe not answered,
// until ctx is done; a probe that fails is only a probe not answered.
func (p *Probe) Run(ctx context.Context) {
	p.mu.Lock()
	if p.since.IsZero() {
		p.since = p.now()
	}
	p.mu.Unlock()
	for {
		next := ProbeEvery
		if err := p.Check(ctx); err != nil {
			next = ProbeRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// Check sends one probe, and records it answered if it was.
func (p *Probe) Check(ctx context.Context) error {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: map[string]string{ProbeLabel: "true"}}}
	res := p.Kube.CoordinationV1().RESTClient().Post().Namespace(p.Namespace).Resource("leases").
		Param("dryRun", metav1.DryRunAll).Body(lease).Do(ctx)
	if err := res.Error(); err != nil {
		return fmt.Errorf("probing the webhook with a dry-run create of Lease %s/%s: %w", p.Namespace, p.Name, err)
	}
	if !slices.ContainsFunc(res.Warnings(), func(w net.WarningHeader) bool { return w.Text == admission.ProbeWarning }) {
		return &NotAnsweredError{Namespace: p.Namespace, Name: p.Name}
	}
	at := p.now()
	p.mu.Lock()
	p.last = at
	p.mu.Unlock()
	if p.Observer != nil {
		p.Observer.ProbeAnswered(at)
	}
	return nil
}

func (p *Probe) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// NotAnsweredError says the API server took the probe but did not get the
// webhook's answer: it did not call the webhook, or the call failed and
// failurePolicy Ignore let the request through.
type NotAnsweredError struct{ Namespace, Name string }

func (e *NotAnsweredError) Error() string {
	return fmt.Sprintf("the dry-run create of Lease %s/%s came back without the webhook's answer: the API server does not reach the webhook", e.Namespace, e.Name)
}
