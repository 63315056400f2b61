package storage

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLatest(t *testing.T) {
	secret := func(name, version string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelVersion: version}}}
	}
	tests := []struct {
		name    string
		secrets []*corev1.Secret
		want    string
	}{
		{"by number, not text", []*corev1.Secret{secret("v9", "9"), secret("v10", "10"), secret("v2", "2")}, "v10"},
		{"unlabelled ones skipped", []*corev1.Secret{secret("bad", "x"), secret("v1", "1")}, "v1"},
		{"none", []*corev1.Secret{secret("bad", "")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := ""
			if got, ok := Latest(tt.secrets); ok {
				name = got.GetName()
			}
			if name != tt.want {
				t.Errorf("Latest = %q, want %q", name, tt.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	good := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "sh.helm.release.v1.web.v3"}, Type: SecretType,
		Data: map[string][]byte{"release": encode(t, releaseJSON, true)}}
	rel, err := Read(good)
	if err != nil || rel.Version != 3 {
		t.Fatalf("Read = %+v, %v", rel, err)
	}
	objs, err := rel.Objects()
	if err != nil || len(objs) != 1 {
		t.Fatalf("Objects = %v, %v", objs, err)
	}
	// Helm's ownership metadata is held, though not in the manifest.
	if l, a := objs[0].GetLabels(), objs[0].GetAnnotations(); l[LabelManagedBy] != "Helm" || a[AnnotationReleaseName] != "web" || a[AnnotationReleaseSpace] != "apps" {
		t.Errorf("labels %v, annotations %v; want Helm's ownership", l, a)
	}
	opaque := good.DeepCopy()
	opaque.Type = corev1.SecretTypeOpaque
	if _, err := Read(opaque); err == nil || !strings.Contains(err.Error(), `has type "Opaque", not Helm's "helm.sh/release.v1"`) {
		t.Errorf("Read of an Opaque Secret = %v", err)
	}
}
