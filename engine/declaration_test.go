package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestDeclarationsRoundTrip(t *testing.T) {
	for name, y := range map[string]string{
		"config file ending in a line break": `
apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: ns, labels: {app.kubernetes.io/managed-by: Helm}}
data:
  app.conf: |
    listen = 8080
    upstream = svc-4f2a9c.backend.svc.cluster.local:9443
    timeout = 30s
`,
		"deployment": benchDeployment,
		"nothing but a name": `
apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
`,
	} {
		t.Run(name, func(t *testing.T) {
			want := &unstructured.Unstructured{Object: obj(t, y)}
			packed, err := packDeclaration(want)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := want.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			// Deflate's framing costs a few bytes, which only the
			// smallest objects do not win back.
			if len(raw) > 256 && len(packed) >= len(raw)*2/3 {
				t.Errorf("packed %d bytes of its %d bytes of JSON, more than two thirds", len(packed), len(raw))
			}
			got, err := unpackDeclaration(packed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.Object, got.Object); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := unpackDeclaration([]byte("not deflated")); err == nil {
		t.Errorf("unpacking garbage gave no error")
	}
}

// BenchmarkDeclaration is what an event pays to read a Deployment's
// declaration back.
func BenchmarkDeclaration(b *testing.B) {
	packed, err := packDeclaration(&unstructured.Unstructured{Object: obj(b, benchDeployment)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(packed)), "packed-bytes")
	for b.Loop() {
		if _, err := unpackDeclaration(packed); err != nil {
			b.Fatal(err)
		}
	}
}

// benchConfigFile is a ConfigMap's config file, about a kilobyte, with the
// mix of names, numbers, addresses and ids that real ones have.
const benchConfigFile = `server.listen = 8080
upstream.timeout = 30s
upstream.backend = svc-3fa9c1.payments.svc.cluster.local:50051
cache.size = 52428
log.level = info
tls.cert = /etc/tls/tls.crt
pool.workers = 16
route.weight = 35
health.interval = 15s
health.path = /healthz
limit.retries = 3
backend.route = svc-0b77e2.orders.svc.cluster.local:8443
session.id = 9c1f3a77d2e84b06
cache.ttl = 600s
server.workers = 24
upstream.retries = 5
log.format = json
tls.enabled = true
pool.size = 128
route.backend = svc-a41d09.users.svc.cluster.local:9090
token.id = 4e0b9d2c6a1f8e35
limit.rate = 4500
health.timeout = 2s
backend.weight = 65
listen.tls = false
cache.path = /var/cache/app
interval.sync = 120s
server.id = 7d3e91c0ab52f468
`

// BenchmarkPackDeclaration is what a declaration costs to pack, once for
// each object at a cold lock, and what it then takes to keep: a ConfigMap
// of a config file, as most of a release's objects are.
func BenchmarkPackDeclaration(b *testing.B) {
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "web-config", "namespace": "shop", "labels": map[string]any{"app.kubernetes.io/instance": "web", "app.kubernetes.io/managed-by": "Helm"}},
		"data":     map[string]any{"app.conf": benchConfigFile},
	}}
	var packed []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if packed, err = packDeclaration(cm); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(packed)), "packed-bytes")
}
