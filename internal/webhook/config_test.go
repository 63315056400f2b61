package webhook

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
)

var (
	configMaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// fakePrevented is a controller that has declared types, and may not have
// declared every lock yet.
type fakePrevented struct {
	types  []schema.GroupVersionResource
	synced bool
}

func (f fakePrevented) PreventedTypes() []schema.GroupVersionResource { return f.types }
func (f fakePrevented) Synced() bool                                  { return f.synced }

type fixedCerts struct{ ca string }

func (f fixedCerts) Current(context.Context) (*Bundle, error) { return &Bundle{CA: []byte(f.ca)}, nil }

// TestConfigurationKeepsRulesUntilSynced: a new leader's controller has
// declared none or some of its locks until it is synced; until then no
// type leaves the live rules, and once synced the rules are exactly the
// declared types.
func TestConfigurationKeepsRulesUntilSynced(t *testing.T) {
	tests := []struct {
		name  string
		live  []schema.GroupVersionResource
		locks fakePrevented
		want  []string
	}{
		{name: "a new leader has declared nothing yet", live: []schema.GroupVersionResource{configMaps},
			locks: fakePrevented{}, want: []string{"configmaps"}},
		{name: "a new leader has declared another type", live: []schema.GroupVersionResource{configMaps},
			locks: fakePrevented{types: []schema.GroupVersionResource{deployments}}, want: []string{"configmaps", "deployments"}},
		{name: "synced, a type no lock holds goes", live: []schema.GroupVersionResource{configMaps, deployments},
			locks: fakePrevented{types: []schema.GroupVersionResource{deployments}, synced: true}, want: []string{"deployments"}},
		{name: "synced with no Prevent lock, no rule is left", live: []schema.GroupVersionResource{configMaps},
			locks: fakePrevented{synced: true}, want: nil},
		{name: "the chart's empty configuration, filled before sync", live: nil,
			locks: fakePrevented{types: []schema.GroupVersionResource{configMaps}}, want: []string{"configmaps"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := Build("helm-locker.ns", admissionregistrationv1.WebhookClientConfig{CABundle: []byte("ca")}, tt.live, func(schema.GroupVersionResource) bool { return false })
			if tt.live == nil {
				live.Webhooks = nil
			}
			live.Labels = map[string]string{"app.kubernetes.io/managed-by": "Helm"}
			kube := fake.NewClientset(live)
			c := &Configuration{Kube: kube, Name: live.Name, URL: "https://127.0.0.1:9443/validate", Locks: tt.locks, Certs: fixedCerts{ca: "ca"}, ProbeNamespace: "ns"}
			if err := c.sync(context.Background(), listerOf(t, live), &scaleCache{disco: kube.Discovery(), known: map[schema.GroupVersion][]string{}}); err != nil {
				t.Fatal(err)
			}
			got, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), live.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var resources []string
			for _, r := range got.Webhooks[0].Rules {
				resources = append(resources, r.Resources...)
			}
			if diff := cmp.Diff(tt.want, resources); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
			if len(got.Webhooks) != 2 || got.Webhooks[1].Name != ProbeWebhook || got.Webhooks[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ns" {
				t.Errorf("webhooks %+v; want the probe's, for namespace ns, after Prevent's", got.Webhooks)
			}
			if got.Labels["app.kubernetes.io/managed-by"] != "Helm" {
				t.Errorf("labels %v: the locker rewrote its owner's labels", got.Labels)
			}
		})
	}
}

// TestConfigurationIsNeverCreated: with no configuration to update, sync
// says so with a MissingError naming it, and creates nothing.
func TestConfigurationIsNeverCreated(t *testing.T) {
	kube := fake.NewClientset()
	c := &Configuration{Kube: kube, Name: "helm-locker.ns", URL: "https://127.0.0.1:9443/validate",
		Locks: fakePrevented{types: []schema.GroupVersionResource{configMaps}, synced: true}, Certs: fixedCerts{ca: "ca"}}
	err := c.sync(context.Background(), listerOf(t), &scaleCache{disco: kube.Discovery(), known: map[schema.GroupVersion][]string{}})
	var missing *MissingError
	if !errors.As(err, &missing) || missing.Name != "helm-locker.ns" {
		t.Errorf("sync = %v, want a MissingError naming helm-locker.ns", err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("sync created %s", a.GetResource())
		}
	}
}

func listerOf(t *testing.T, objs ...*admissionregistrationv1.ValidatingWebhookConfiguration) admissionlisters.ValidatingWebhookConfigurationLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		if err := indexer.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return admissionlisters.NewValidatingWebhookConfigurationLister(indexer)
}
