package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSecretCerts: a bundle is made once and kept in the Secret; it is
// renewed, under the same CA, when it nears its end or names other hosts.
func TestSecretCerts(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kube := fake.NewClientset()
	certs := &SecretCerts{Kube: kube, Namespace: "ns", Name: "tls", Hosts: []string{"127.0.0.1", "helm-locker-webhook.ns.svc"}, Now: func() time.Time { return now }}
	writes := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "create" || a.GetVerb() == "update" {
				n++
			}
		}
		return n
	}

	first, err := certs.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.Cert.Leaf
	if !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || leaf.DNSNames[0] != "helm-locker-webhook.ns.svc" {
		t.Errorf("serving certificate names %v %v", leaf.IPAddresses, leaf.DNSNames)
	}
	block, _ := pem.Decode(first.CA)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "helm-locker-webhook.ns.svc", CurrentTime: now}); err != nil {
		t.Errorf("the serving certificate does not verify against the CA: %v", err)
	}

	again, err := certs.Current(ctx)
	if err != nil || !again.Cert.Leaf.Equal(leaf) || writes() != 1 {
		t.Errorf("a second Current made %d writes in all (want 1) and the same certificate: %v", writes(), err)
	}

	now = leaf.NotAfter.Add(-renewBefore + time.Hour)
	renewed, err := certs.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Cert.Leaf.Equal(leaf) || string(renewed.CA) != string(first.CA) || writes() != 2 {
		t.Errorf("near its end: renewed %v, same CA %v, %d writes; want a new certificate under the same CA", !renewed.Cert.Leaf.Equal(leaf), string(renewed.CA) == string(first.CA), writes())
	}

	certs.Hosts = append(certs.Hosts, "other.example")
	moved, err := certs.Current(ctx)
	if err != nil || !strings.Contains(strings.Join(moved.Cert.Leaf.DNSNames, ","), "other.example") {
		t.Errorf("a new host: %v, %v", moved.Cert.Leaf.DNSNames, err)
	}
}

func TestBuild(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	got := Build("helm-locker.ns", admissionregistrationv1.WebhookClientConfig{CABundle: []byte("ca")},
		[]schema.GroupVersionResource{configMaps, deployments}, func(gvr schema.GroupVersionResource) bool { return gvr == deployments })
	w := got.Webhooks[0]
	var rules [][]string
	for _, r := range w.Rules {
		rules = append(rules, append(append(r.APIGroups, r.APIVersions...), r.Resources...))
	}
	if diff := cmp.Diff([][]string{{"", "v1", "configmaps"}, {"apps", "v1", "deployments", "deployments/scale"}}, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun || *w.TimeoutSeconds > 5 {
		t.Errorf("failure policy %s, side effects %s, timeout %d; want Ignore, NoneOnDryRun, a few seconds", *w.FailurePolicy, *w.SideEffects, *w.TimeoutSeconds)
	}
	if len(w.MatchConditions) != 1 || !strings.Contains(w.MatchConditions[0].Expression, HelmReleaseMarker) || !strings.Contains(w.MatchConditions[0].Expression, ManifestLockMarker) {
		t.Errorf("match conditions %+v", w.MatchConditions)
	}
	if empty := Build("x", admissionregistrationv1.WebhookClientConfig{}, nil, nil); len(empty.Webhooks[0].Rules) != 0 {
		t.Errorf("with no Prevent lock, rules %+v; want none", empty.Webhooks[0].Rules)
	}
}

// TestDirCerts reads a cert-manager style folder, and again once tls.crt
// changes.
func TestDirCerts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(hosts ...string) {
		ca, err := newAuthority(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cert, key, err := ca.issue(hosts, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{keyCA: ca.certPEM, keyCert: cert, keyKey: key} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("a.example")
	certs := &DirCerts{Dir: dir}
	first, err := certs.Current(ctx)
	if err != nil || first.Cert.Leaf.DNSNames[0] != "a.example" {
		t.Fatalf("Current = %v, %v", first, err)
	}
	if again, _ := certs.Current(ctx); again != first {
		t.Error("an unchanged folder was read again")
	}
	write("b.example")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, keyCert), later, later); err != nil {
		t.Fatal(err)
	}
	if renewed, err := certs.Current(ctx); err != nil || renewed.Cert.Leaf.DNSNames[0] != "b.example" {
		t.Errorf("after tls.crt changed: %v, %v; want the new certificate", renewed, err)
	}
	if _, err := (&DirCerts{Dir: t.TempDir()}).Current(ctx); err == nil || !strings.Contains(err.Error(), "--webhook-cert-dir") {
		t.Errorf("an empty folder: %v; want an error naming --webhook-cert-dir", err)
	}
}

// TestSecretCertsAcrossACARotation: two replicas share the Secret. One
// replaces the CA (it would expire before a new serving certificate) while
// the other still serves a certificate of the old one. The caBundle the
// first writes holds both CAs, so the API server verifies either replica;
// the second reads the Secret again within Reread and serves the new
// certificate; and the old CA leaves the bundle once it has expired.
func TestSecretCertsAcrossACARotation(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	hosts := []string{"127.0.0.1", "helm-locker-webhook.ns.svc"}
	// A CA that expires in 200 days, sooner than a serving certificate
	// would, and a serving certificate of it good for 265.
	old, err := newAuthority(now.Add(200*24*time.Hour - caLifetime))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := old.issue(hosts, now.Add(-100*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tls"},
		Data: map[string][]byte{keyCA: old.certPEM, "ca.key": old.keyPEM, keyCert: cert, keyKey: key}})
	standby := &SecretCerts{Kube: kube, Namespace: "ns", Name: "tls", Hosts: hosts, Now: clock}
	served, err := standby.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !served.Cert.Leaf.Equal(mustLeaf(t, cert)) {
		t.Fatal("the standby does not serve the Secret's certificate")
	}

	// The leader's hosts changed (an upgrade): it issues anew, and the
	// old CA is too close to its end to sign, so it is replaced.
	leader := &SecretCerts{Kube: kube, Namespace: "ns", Name: "tls", Hosts: append(slices.Clone(hosts), "helm-locker-webhook.ns.svc.cluster.local"), Now: clock}
	rotated, err := leader.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cas := certificates(t, rotated.CA); len(cas) != 2 || !cas[1].Equal(old.cert) {
		t.Fatalf("the caBundle after the rotation holds %d certificates; want the new CA, then the old one", len(cas))
	}
	for name, leaf := range map[string]*x509.Certificate{"the leader's": rotated.Cert.Leaf, "the standby's": served.Cert.Leaf} {
		if err := verify(rotated.CA, leaf, now); err != nil {
			t.Errorf("%s certificate does not verify against the caBundle: %v", name, err)
		}
	}

	now = now.Add(Reread / 2)
	if b, _ := standby.Current(ctx); !b.Cert.Leaf.Equal(served.Cert.Leaf) {
		t.Error("the standby read the Secret again before Reread")
	}
	now = now.Add(Reread)
	reread, err := standby.Current(ctx)
	if err != nil || !reread.Cert.Leaf.Equal(rotated.Cert.Leaf) || !bytes.Equal(reread.CA, rotated.CA) {
		t.Errorf("after Reread the standby serves the new certificate %v and caBundle %v (%v); want both", reread.Cert.Leaf.Equal(rotated.Cert.Leaf), bytes.Equal(reread.CA, rotated.CA), err)
	}

	now = old.cert.NotAfter.Add(time.Hour)
	later, err := leader.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cas := certificates(t, later.CA); len(cas) != 1 || cas[0].Equal(old.cert) {
		t.Errorf("once the old CA has expired the caBundle holds %d certificates; want the new CA alone", len(cas))
	}
}

func mustLeaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	return certificates(t, certPEM)[0]
}

// certificates parses every certificate of a PEM bundle.
func certificates(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// verify checks leaf as the API server would against caBundle.
func verify(caBundle []byte, leaf *x509.Certificate, at time.Time) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return errors.New("no certificate in the caBundle")
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "helm-locker-webhook.ns.svc", CurrentTime: at})
	return err
}
