package webhook

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
