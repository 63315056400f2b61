package webhook

import (
	"cmp"
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
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
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

// PreventWebhook is the name of the webhook, in the configuration, that
// sends the writes Prevent locks judge.
const PreventWebhook = "prevent.helm-locker.io"

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
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    PreventWebhook,
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

// Prevented is what the configuration asks of the controller.
type Prevented interface {
	// PreventedTypes lists the types Prevent locks hold now.
	PreventedTypes() []schema.GroupVersionResource
	// Synced reports whether every lock the controller serves, of each
	// kind (HelmReleases and ManifestLocks), has been declared once:
	// until then PreventedTypes may lack types that locks hold.
	Synced() bool
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
	// ProbeNamespace, if set, adds the probe webhook (BuildProbe) for
	// dry-run Lease creates there: the registration namespace.
	ProbeNamespace string
	// Locks says which types Prevent locks hold.
	Locks Prevented
	Certs CertSource
	// Every is how often the wanted rules and the live configuration are
	// compared: in memory, and one read only when they differ.
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
	var report errorReport
	for {
		err := c.sync(ctx, lister, &scale)
		if report.due(err, time.Now()) {
			logger.Error(err, "Cannot keep the webhook configuration; retrying", "name", c.Name)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// sync makes the live configuration what the locks want, if it is not.
func (c *Configuration) sync(ctx context.Context, lister admissionlisters.ValidatingWebhookConfigurationLister, scale *scaleCache) error {
	bundle, err := c.Certs.Current(ctx)
	if err != nil {
		return fmt.Errorf("no serving certificate for the webhook: %w", err)
	}
	// Synced first: once it is true, the types read after it are every
	// lock's.
	synced := c.Locks.Synced()
	types := c.Locks.PreventedTypes()
	want := func(live *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration {
		cfg := Build(c.Name, c.clientConfig(bundle.CA), wantedTypes(types, synced, live), scale.scalable)
		if c.ProbeNamespace != "" {
			cfg.Webhooks = append(cfg.Webhooks, BuildProbe(c.clientConfig(bundle.CA), c.ProbeNamespace))
		}
		return cfg
	}
	if live, err := lister.Get(c.Name); err == nil && sameWebhooks(live, want(live)) {
		return nil
	}
	return c.update(ctx, want)
}

// clientConfig is how the API server reaches the webhook and verifies it.
func (c *Configuration) clientConfig(ca []byte) admissionregistrationv1.WebhookClientConfig {
	client := admissionregistrationv1.WebhookClientConfig{CABundle: ca}
	if c.URL != "" {
		client.URL = ptr.To(c.URL)
	} else {
		client.Service = c.Service
	}
	return client
}

// update writes want, built against the configuration read afresh, into
// it. It never creates the configuration: the chart does, since RBAC cannot
// limit create to a name (see MissingError). Labels and the rest of the
// metadata stay as their owner set them; only the webhooks are the
// locker's.
func (c *Configuration) update(ctx context.Context, want func(live *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	client := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	live, err := client.Get(ctx, c.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return &MissingError{Name: c.Name}
	case err != nil:
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", c.Name, err)
	}
	w := want(live)
	if sameWebhooks(live, w) {
		return nil
	}
	live = live.DeepCopy()
	live.Webhooks = w.Webhooks
	if _, err := client.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating ValidatingWebhookConfiguration %s: %w", c.Name, err)
	}
	return nil
}

// wantedTypes are the types the rules name: those Prevent locks hold, and
// until every lock is declared also those the live configuration names. A
// new leader's controller declares its locks only once its caches have
// synced; rules built from what it has declared by then would switch
// Prevent off for every type not yet declared, after each failover,
// restart or rollout (issue 31: 0 rules for a second after a restart, and
// an edit let through). That holds for ManifestLocks as for HelmReleases:
// a type only a Prevent ManifestLock holds stays until that lock is
// declared too.
func wantedTypes(types []schema.GroupVersionResource, synced bool, live *admissionregistrationv1.ValidatingWebhookConfiguration) []schema.GroupVersionResource {
	if synced || live == nil {
		return types
	}
	seen := map[schema.GroupVersionResource]bool{}
	var out []schema.GroupVersionResource
	add := func(gvr schema.GroupVersionResource) {
		if !seen[gvr] {
			seen[gvr] = true
			out = append(out, gvr)
		}
	}
	for _, gvr := range types {
		add(gvr)
	}
	for _, gvr := range ruleTypes(live) {
		add(gvr)
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionResource) int { return cmp.Compare(a.String(), b.String()) })
	return out
}

// ruleTypes are the types the rules of the configuration's Prevent webhook
// name, subresources aside; Build adds those again where they are served.
func ruleTypes(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, w := range cfg.Webhooks {
		if w.Name != PreventWebhook {
			continue
		}
		for _, r := range w.Rules {
			for _, g := range r.APIGroups {
				for _, v := range r.APIVersions {
					for _, res := range r.Resources {
						if !strings.Contains(res, "/") && g != "*" && v != "*" && res != "*" {
							out = append(out, schema.GroupVersionResource{Group: g, Version: v, Resource: res})
						}
					}
				}
			}
		}
	}
	return out
}

// MissingError says the configuration is not there to update. The chart
// creates it (templates/webhookconfiguration.yaml), one per shard: RBAC
// cannot limit create to a name, and a locker that may create webhook
// configurations may create one that intercepts any request. The locker
// holds only get and update by name.
type MissingError struct{ Name string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("ValidatingWebhookConfiguration %s does not exist, and the locker only updates it: "+
		"the chart creates it; outside the chart, create it empty (docs/modes.md, Prevent mode)", e.Name)
}

// errorReport says when an error that repeats at every tick is worth a log
// line: when it changes, and once a minute while it lasts.
type errorReport struct {
	last string
	at   time.Time
}

func (r *errorReport) due(err error, now time.Time) bool {
	if err == nil {
		r.last = ""
		return false
	}
	if err.Error() == r.last && now.Sub(r.at) < time.Minute {
		return false
	}
	r.last, r.at = err.Error(), now
	return true
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
