package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// TestReleaseToRender: diff --rerender of a locked release renders only
// the chart its lock verified, and refuses it rewritten; with no lock it
// renders the Secret as it stands, and says nothing verified it.
func TestReleaseToRender(t *testing.T) {
	const manifest = "---\n# Source: c/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n"
	json := `{"name":"web","namespace":"apps","version":1,"info":{"status":"deployed"},"manifest":` + strconv.Quote(manifest) +
		`,"chart":{"metadata":{"name":"c","version":"1.0.0","apiVersion":"v2"},"templates":[]},"config":{"a":1}}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(json))
	_ = zw.Close()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.web.v1", Namespace: "apps", Labels: map[string]string{"owner": "helm", "name": "web", "status": "deployed", "version": "1"}},
		Type:       storage.SecretType,
		Data:       map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(gz.Bytes()))},
	}
	stored, err := storage.Read(secret, "apps", "web")
	if err != nil {
		t.Fatal(err)
	}
	rk := v1alpha1.ReleaseKey{Namespace: "apps", Name: "web"}
	locked := func(chartDigest string) *v1alpha1.HelmRelease {
		hr := &v1alpha1.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-helm-system", Name: "web"}}
		hr.Status.Verified = &v1alpha1.VerifiedRevision{Release: rk, Revision: 1, ManifestDigest: storage.Digest(manifest), ChartDigest: chartDigest}
		return hr
	}
	tests := []struct {
		name      string
		hr        *v1alpha1.HelmRelease
		warns     bool
		untrusted bool
		err       string
	}{
		{name: "no lock: unverified, and it says so", warns: true},
		{name: "the lock's verified chart", hr: locked(stored.ChartDigest())},
		{name: "rewritten since the lock verified it", hr: locked("another chart"), untrusted: true},
		{name: "a lock that verified nothing", hr: &v1alpha1.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-helm-system", Name: "web"}}, err: "has verified no revision of release apps/web yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warn strings.Builder
			rel, err := releaseToRender(context.Background(), fake.NewClientset(secret), rk, tt.hr, &warn)
			var untrusted *render.UntrustedError
			switch {
			case tt.untrusted:
				if !errors.As(err, &untrusted) {
					t.Errorf("error = %v, want an UntrustedError", err)
				}
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error = %v, want one saying %q", err, tt.err)
				}
			case err != nil || rel.Version != 1:
				t.Errorf("releaseToRender = %+v, %v; want revision 1", rel, err)
			}
			if got := strings.HasPrefix(warn.String(), "Warning: no HelmRelease you may read locks release apps/web"); got != tt.warns {
				t.Errorf("warned %q, want a warning: %v", warn.String(), tt.warns)
			}
		})
	}
}
