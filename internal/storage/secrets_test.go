package storage

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLatest(t *testing.T) {
	secret := func(name, version string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelName: "web", LabelVersion: version}}}
	}
	tests := []struct {
		name    string
		secrets []*corev1.Secret
		want    string
	}{
		{"by number, not text", []*corev1.Secret{secret("sh.helm.release.v1.web.v9", "9"), secret("sh.helm.release.v1.web.v10", "10"), secret("sh.helm.release.v1.web.v2", "2")}, "sh.helm.release.v1.web.v10"},
		{"unlabelled ones skipped", []*corev1.Secret{secret("bad", "x"), secret("sh.helm.release.v1.web.v1", "1")}, "sh.helm.release.v1.web.v1"},
		{"none", []*corev1.Secret{secret("bad", "")}, ""},
		// A Secret labelled as a higher revision, not named as Helm
		// names it, is no revision.
		{"misnamed ones skipped", []*corev1.Secret{secret("sh.helm.release.v1.web.v1", "1"), secret("planted", "99"), secret("sh.helm.release.v1.other.v98", "98")}, "sh.helm.release.v1.web.v1"},
		{"revision 0 skipped", []*corev1.Secret{secret("sh.helm.release.v1.web.v0", "0")}, ""},
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
	good := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "sh.helm.release.v1.web.v3",
		Labels: map[string]string{LabelOwner: "helm", LabelName: "web", LabelVersion: "3", LabelStatus: "deployed"}}, Type: SecretType,
		Data: map[string][]byte{"release": encode(t, releaseJSON, true)}}
	rel, err := Read(good, "apps", "web")
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

	// forged returns good with its stored release JSON edited.
	forged := func(from, to string) func(*corev1.Secret) {
		return func(s *corev1.Secret) {
			s.Data["release"] = encode(t, strings.Replace(releaseJSON, from, to, 1), true)
		}
	}
	tests := []struct {
		name               string
		edit               func(*corev1.Secret)
		namespace, release string
		want               string
	}{
		{"Opaque", func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }, "apps", "web",
			`release Secret apps/sh.helm.release.v1.web.v3: has type "Opaque", not Helm's "helm.sh/release.v1"`},
		{"read for another release", nil, "apps", "api", "is labelled as release apps/web, not apps/api"},
		{"read for another namespace", nil, "other", "web", "is labelled as release apps/web, not other/web"},
		{"name disagrees with the version label", func(s *corev1.Secret) { s.Labels[LabelVersion] = "4" }, "apps", "web",
			`its name does not agree with its labels name="web" and version="4"`},
		{"decodes to another namespace", forged(`"namespace":"apps"`, `"namespace":"kube-system"`), "apps", "web",
			"holds revision 3 of release kube-system/web, where its name and labels say revision 3 of apps/web"},
		{"decodes to another release", forged(`"name":"web"`, `"name":"api"`), "apps", "web",
			"holds revision 3 of release apps/api, where its name and labels say revision 3 of apps/web"},
		{"decodes to another revision", forged(`"version":3`, `"version":2`), "apps", "web",
			"holds revision 2 of release apps/web, where its name and labels say revision 3 of apps/web"},
		{"not a release", func(s *corev1.Secret) { s.Data["release"] = []byte("%%%") }, "apps", "web", "not base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good.DeepCopy()
			if tt.edit != nil {
				tt.edit(s)
			}
			_, err := Read(s, tt.namespace, tt.release)
			var invalid *InvalidError
			if !errors.As(err, &invalid) || invalid.Secret != "apps/sh.helm.release.v1.web.v3" || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read error = %v, want an InvalidError naming the Secret and containing %q", err, tt.want)
			}
		})
	}
}
