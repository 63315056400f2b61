package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// TestDeclareAllListsDeployedReleases: at startup the deployed revisions
// are read with one list a page, not a GET per release.
func TestDeclareAllListsDeployedReleases(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	// Planted by a tenant who may create Secrets: a deployed revision
	// of an unregistered release, and one of the registered release's
	// name in the tenant's own namespace.
	unregistered := releaseSecret(t, "deployed", 1)
	unregistered.Name, unregistered.Labels["name"] = "sh.helm.release.v1.planted.v1", "planted"
	elsewhere := releaseSecret(t, "deployed", 1)
	elsewhere.Namespace = "tenant"
	for _, s := range []*corev1.Secret{unregistered, elsewhere} {
		if err := kube.Tracker().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	kube.ClearActions()
	var listed []string
	kube.PrependReactor("list", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l := a.(clienttesting.ListActionImpl)
		listed = append(listed, fmt.Sprintf("%s limit %d", l.ListRestrictions.Labels, l.ListOptions.Limit))
		return false, nil, nil
	})
	c.declareAll(context.Background())
	gets := 0
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "secrets" && a.GetVerb() == "get" {
			gets++
		}
	}
	if want := []string{"name in (rel),owner=helm,status=deployed limit 16"}; !slices.Equal(listed, want) || gets != 0 {
		t.Errorf("declareAll sent lists %q and %d GETs of Secrets, want %q and none", listed, gets, want)
	}
	if st := c.state(helmReleaseKey("cattle-helm-system", "hr")); st.rel == nil || st.rel.Version != 1 {
		t.Errorf("the release is not declared: %+v", st.rel)
	}
}

// TestDeclareAllClaims: a leader claims each unclaimed CR as it declares
// it at startup, while the API server has little else to do, and its first
// sync does not claim it again; a replica standing by claims nothing.
func TestDeclareAllClaims(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only=%v", readOnly), func(t *testing.T) {
			c, dyn := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
			c.cfg.ReadOnly = readOnly
			c.readOnly.Store(readOnly)
			claims := func() int {
				n := 0
				for _, a := range dyn.Actions() {
					if a.GetVerb() == "patch" && a.GetResource().Resource == "helmreleases" && a.GetSubresource() == "" {
						n++
					}
				}
				return n
			}
			c.declareAll(context.Background())
			want := 1
			if readOnly {
				want = 0
			}
			if got := claims(); got != want {
				t.Fatalf("declareAll sent %d claims, want %d", got, want)
			}
			if readOnly {
				return
			}
			hr, err := dyn.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Get(context.Background(), "hr", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if owner := hr.GetAnnotations()[v1alpha1.ManagedByAnnotation]; owner != c.cfg.ControllerName {
				t.Errorf("managed-by after declareAll = %q, want %q", owner, c.cfg.ControllerName)
			}
			if _, err := c.sync(context.Background(), helmReleaseKey("cattle-helm-system", "hr")); err != nil {
				t.Fatal(err)
			}
			if got := claims(); got != 1 {
				t.Errorf("after the first sync, %d claims were sent; want the one of declareAll", got)
			}
		})
	}
}

// TestListDeployedListsAhead: the next page of release Secrets is listed
// while the one before is declared, so the API server's time for it is
// not added to the locker's. The first page's work waits for the second
// list; listed one after the other, it would wait in vain.
func TestListDeployedListsAhead(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	var lists atomic.Int32
	second := make(chan struct{})
	deployed := func(name string) []corev1.Secret {
		return []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{storage.LabelOwner: "helm", storage.LabelName: "rel", storage.LabelStatus: "deployed"}}}}
	}
	kube.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		switch lists.Add(1) {
		case 1:
			return true, &corev1.SecretList{ListMeta: metav1.ListMeta{Continue: "next"}, Items: deployed("a")}, nil
		case 2:
			close(second)
		}
		return true, &corev1.SecretList{Items: deployed("b")}, nil
	})
	var got []string
	err := c.listDeployed(context.Background(), c.crs.GetIndexer().ListIndexFuncValues(byRelease), func(page []corev1.Secret) {
		if len(got) == 0 {
			select {
			case <-second:
			case <-time.After(5 * time.Second):
				t.Error("the second page was not listed while the first was worked on")
			}
		}
		for _, s := range page {
			got = append(got, s.Name)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("pages held %v, want %v", got, want)
	}
}

// TestDeployedSelectors: the startup lists select the registered releases'
// names, a hundred at a time, and leave out names no Secret can carry.
func TestDeployedSelectors(t *testing.T) {
	var many []string
	for i := range 150 {
		many = append(many, fmt.Sprintf("apps/r%03d", i))
	}
	tests := []struct {
		name     string
		releases []string
		want     []int // names per selector
		contains string
	}{
		{"none", nil, nil, ""},
		{"a name registered twice", []string{"a/web", "b/web", "a/api"}, []int{2}, "owner=helm,status=deployed,name in (api,web)"},
		{"not a label value", []string{"a/web", "a/" + strings.Repeat("x", 64), "a/bad name"}, []int{1}, "name in (web)"},
		{"chunked", many, []int{100, 50}, "name in (r000,r001,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := deployedSelectors(tt.releases)
			var sizes []int
			for _, s := range got {
				sizes = append(sizes, strings.Count(s, ",")-1)
			}
			if !slices.Equal(sizes, tt.want) {
				t.Errorf("deployedSelectors gave %d selectors of %v names, want %v: %q", len(got), sizes, tt.want, got)
			}
			if tt.contains != "" && !strings.Contains(got[0], tt.contains) {
				t.Errorf("deployedSelectors = %q, want the first to contain %q", got, tt.contains)
			}
		})
	}
}

// TestDeclareAllReadsOneByOneWhenPlanted: when most deployed release
// Secrets of the registered releases' names are not what a lock reads
// (planted in other namespaces by whoever may create Secrets there), the
// startup list is skipped, and each registered release is read alone.
func TestDeclareAllReadsOneByOneWhenPlanted(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	metas := c.cfg.Metadata.(*metadatafake.FakeMetadataClient)
	for i := range 2 + startupPage {
		planted := releaseSecret(t, "deployed", 1)
		planted.Namespace, planted.UID = fmt.Sprintf("tenant-%d", i), types.UID(fmt.Sprintf("planted-%d", i))
		if err := kube.Tracker().Add(planted); err != nil {
			t.Fatal(err)
		}
		if err := metas.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: planted.ObjectMeta}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.secrets.GetStore().List()) < 2+startupPage+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if wanted, listed := c.deployedCounts(c.crs.GetIndexer().ListIndexFuncValues(byRelease)); wanted != 1 || listed != 2+startupPage+1 {
		t.Fatalf("deployedCounts = %d wanted, %d listed; want 1 and %d", wanted, listed, 2+startupPage+1)
	}
	kube.ClearActions()
	c.declareAll(context.Background())
	lists, gets := 0, 0
	for _, a := range kube.Actions() {
		if a.GetResource().Resource != "secrets" {
			continue
		}
		switch a.GetVerb() {
		case "list":
			lists++
		case "get":
			gets++
		}
	}
	if lists != 0 || gets != 1 {
		t.Errorf("declareAll sent %d lists and %d GETs of Secrets, want none and one", lists, gets)
	}
	if st := c.state(helmReleaseKey("cattle-helm-system", "hr")); st.rel == nil || st.rel.Version != 1 {
		t.Errorf("the release is not declared: %+v", st.rel)
	}
}

// TestDeclareAllLeavesArrivals: a CR created while declareAll lists the
// deployed release Secrets (CRs applied together with the locker) is not
// declared at the end of it with a GET of its Secret, as the CRs of a
// start that the list missed are: it is an arrival, and its first sync
// hands it to the gatherer, which lists.
func TestDeclareAllLeavesArrivals(t *testing.T) {
	ctx := context.Background()
	c, dyn := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	metas := c.cfg.Metadata.(*metadatafake.FakeMetadataClient)
	secret := releaseSecretWith(t, "deployed", 1, func(rel map[string]any) { rel["name"] = "late" })
	secret.Name, secret.UID, secret.Labels["name"] = "sh.helm.release.v1.late.v1", "uid-late", "late"
	if err := kube.Tracker().Add(secret); err != nil {
		t.Fatal(err)
	}
	if err := metas.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: secret.ObjectMeta}); err != nil {
		t.Fatal(err)
	}
	late := helmRelease(nil)
	late.SetName("late")
	if err := unstructured.SetNestedField(late.Object, "late", "spec", "release", "name"); err != nil {
		t.Fatal(err)
	}
	lateKey := helmReleaseKey("cattle-helm-system", "late")
	waitFor := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the late release's Secret in the cache", func() bool { return len(c.secrets.GetStore().List()) == 2 })
	kube.ClearActions()
	var created atomic.Bool
	kube.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if created.CompareAndSwap(false, true) {
			if _, err := dyn.Resource(v1alpha1.Resource).Namespace("cattle-helm-system").Create(ctx, late, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
			waitFor("the late CR in the cache", func() bool {
				_, exists, _ := c.crs.GetIndexer().GetByKey(lateKey.ObjectName.String())
				return exists
			})
		}
		return false, nil, nil
	})
	c.declareAll(ctx)
	gets := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetResource().Resource == "secrets" && a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}
	if !created.Load() {
		t.Fatal("declareAll listed no release Secrets")
	}
	if n := gets(); n != 0 {
		t.Errorf("declareAll sent %d GETs of Secrets, want none", n)
	}
	if st := c.state(lateKey); st.rel != nil {
		t.Errorf("declareAll declared the CR that came during its list: %+v", st.rel)
	}
	if st := c.state(helmReleaseKey("cattle-helm-system", "hr")); st.rel == nil {
		t.Error("declareAll did not declare the CR it started with")
	}
	// Past the start's declaring, the late CR's first sync is an arrival.
	c.declaredAll.Store(true)
	if _, err := c.sync(ctx, lateKey); err != nil {
		t.Fatal(err)
	}
	if !c.arrivals.holds(lateKey) || gets() != 0 {
		t.Errorf("the late CR's first sync: held by arrivals %v, %d GETs of Secrets; want held and none", c.arrivals.holds(lateKey), gets())
	}
}
