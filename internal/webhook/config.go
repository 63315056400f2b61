package webhook

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
)

// Markers are the annotations that mark an object a Prevent lock may hold;
// the API server sends only requests for objects that carry one (see
// MatchCondition). Helm sets the first on every object of a release; a
// ManifestLock in Prevent mode declares the second on its objects.
const (
	HelmReleaseMarker  = "meta.helm.sh/release-name"
	ManifestLockMarker = mlv1.MarkerAnnotation
)

// MatchCondition is the CEL expression the API server evaluates before it
// calls the webhook: a request to an object that no lock could hold never
// reaches it. A scale request carries a Scale, which has no annotations.
// On DELETE object is null, and on CREATE oldObject is.
var MatchCondition = fmt.Sprintf(`request.subResource == 'scale' || `+
	`(object != null && has(object.metadata.annotations) && (%[1]q in object.metadata.annotations || %[2]q in object.metadata.annotations)) || `+
	`(oldObject != null && has(oldObject.metadata.annotations) && (%[1]q in oldObject.metadata.annotations || %[2]q in oldObject.metadata.annotations))`,
	HelmReleaseMarker, ManifestLockMarker)

// Timeout is how long the API server waits for the webhook before it
// lets the request through: the locker answers from memory, in well under
// a second, or it is down.
const Timeout = 3

// Path is where the webhook serves.
const Path = "/validate"

// Build returns the configuration that sends writes of the given types to
// the webhook: rules name only those types, with their scale subresource
// where scalable says they have one.
func Build(name string, client admissionregistrationv1.WebhookClientConfig, types []schema.GroupVersionResource, scalable func(schema.GroupVersionResource) bool) *admissionregistrationv1.ValidatingWebhookConfiguration {
	var rules []admissionregistrationv1.RuleWithOperations
	for _, gvr := range types {
		resources := []string{gvr.Resource}
		if scalable(gvr) {
			resources = append(resources, gvr.Resource+"/scale")
		}
		rules = append(rules, admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{gvr.Group}, APIVersions: []string{gvr.Version}, Resources: resources,
				Scope: ptr.To(admissionregistrationv1.AllScopes)},
		})
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "helm-locker"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "prevent.helm-locker.io",
			ClientConfig:            client,
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr.To[int32](Timeout),
			AdmissionReviewVersions: []string{"v1"},
			// What the API server would default them to, so that the
			// configuration read back compares equal.
			NamespaceSelector: &metav1.LabelSelector{},
			ObjectSelector:    &metav1.LabelSelector{},
			MatchConditions:   []admissionregistrationv1.MatchCondition{{Name: "lockable", Expression: MatchCondition}},
		}},
	}
}

// Configuration keeps the ValidatingWebhookConfiguration current: its rules
// follow the types Prevent locks hold, its caBundle the serving
// certificate's CA. The API server never calls webhooks for webhook
// configurations, so no webhook guards it; this puts it back when someone
// edits it.
type Configuration struct {
	Kube kubernetes.Interface
	// Name is the configuration's name.
	Name string
	// URL, if set, is where the API server calls the webhook, as for a
	// locker outside the cluster; else Service.
	URL     string
	Service *admissionregistrationv1.ServiceReference
	// Types lists the types Prevent locks hold now.
	Types func() []schema.GroupVersionResource
	Certs CertSource
	// Every is how often Types and the live configuration are compared:
	// in memory, and one read only when they differ.
	Every time.Duration
}

// Run keeps the configuration until ctx is done. It leaves it in place
// then: the API server lets requests through while no webhook answers.
// The live configuration is watched, by name, so that an edit of it is
// seen without polling.
func (c *Configuration) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	scale := scaleCache{disco: c.Kube.Discovery(), known: map[schema.GroupVersion][]string{}}
	factory := informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.Name).String()
	}))
	lister := factory.Admissionregistration().V1().ValidatingWebhookConfigurations().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())
	ticker := time.NewTicker(c.Every)
	defer ticker.Stop()
	for {
		bundle, err := c.Certs.Current(ctx)
		if err == nil {
			client := admissionregistrationv1.WebhookClientConfig{CABundle: bundle.CA}
			if c.URL != "" {
				client.URL = ptr.To(c.URL)
			} else {
				client.Service = c.Service
			}
			want := Build(c.Name, client, c.Types(), scale.scalable)
			if live, err := lister.Get(c.Name); err != nil || !sameWebhooks(live, want) {
				if err := c.apply(ctx, want); err != nil {
					logger.Error(err, "Cannot write the webhook configuration; retrying", "name", c.Name)
				}
			}
		} else {
			logger.Error(err, "No serving certificate for the webhook; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// apply makes the live configuration want.
func (c *Configuration) apply(ctx context.Context, want *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	client := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	live, err := client.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.Create(ctx, want, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	case sameWebhooks(live, want):
		return nil
	}
	live = live.DeepCopy()
	live.Webhooks = want.Webhooks
	live.Labels = want.Labels
	_, err = client.Update(ctx, live, metav1.UpdateOptions{})
	return err
}

// sameWebhooks compares what Build sets; the API server fills in defaults
// Build sets too, so a read-back compares equal.
func sameWebhooks(a, b *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
	return reflect.DeepEqual(a.Webhooks, b.Webhooks)
}

// scaleCache remembers which types have a scale subresource, from
// discovery, one request per group version.
type scaleCache struct {
	disco discovery.DiscoveryInterface
	known map[schema.GroupVersion][]string
}

func (s *scaleCache) scalable(gvr schema.GroupVersionResource) bool {
	gv := gvr.GroupVersion()
	names, ok := s.known[gv]
	if !ok {
		list, err := s.disco.ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			return false
		}
		for _, r := range list.APIResources {
			if strings.HasSuffix(r.Name, "/scale") {
				names = append(names, strings.TrimSuffix(r.Name, "/scale"))
			}
		}
		s.known[gv] = names
	}
	return slices.Contains(names, gvr.Resource)
}
