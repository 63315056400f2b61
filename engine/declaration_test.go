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
