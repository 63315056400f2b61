package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/openapi"
	clienttesting "k8s.io/client-go/testing"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
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
		listed = append(listed, fmt.Sprintf("%s: %s limit %d", l.Namespace, l.ListRestrictions.Labels, l.ListOptions.Limit))
		return false, nil, nil
	})
	c.declareAll(context.Background())
	gets := 0
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "secrets" && a.GetVerb() == "get" {
			gets++
		}
	}
	if want := []string{"apps: name in (rel),owner=helm,status=deployed limit 16"}; !slices.Equal(listed, want) || gets != 0 {
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

// TestListDeployedFillsPages: the startup lists go namespace by
// namespace, and fill each page across them, so that releases of one a
// namespace are still declared a page at a time; and they go on while a
// page is worked on, so that the API server's time for them is not added
// to the locker's. The first page's work waits for the lists of the next
// pages; made one after the other, it would wait in vain.
func TestListDeployedFillsPages(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	const namespaces = 40
	var releases []string
	for i := range namespaces {
		releases = append(releases, fmt.Sprintf("ns-%02d/rel", i))
	}
	var lists atomic.Int32
	var badLimit atomic.Int64
	kube.PrependReactor("list", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		if limit := a.(clienttesting.ListActionImpl).ListOptions.Limit; limit < 1 || limit > startupPage {
			badLimit.Store(limit)
		}
		// The fake filters what a reactor returns by the selector.
		labels := map[string]string{storage.LabelOwner: "helm", storage.LabelName: "rel", storage.LabelStatus: "deployed"}
		secret := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.rel.v1", Namespace: a.GetNamespace(), Labels: labels}}
		return true, &corev1.SecretList{Items: []corev1.Secret{secret}}, nil
	})
	seen := map[string]int{}
	var sizes []int
	err := c.listDeployed(context.Background(), releases, func(page []corev1.Secret) {
		if len(sizes) == 0 {
			for deadline := time.Now().Add(5 * time.Second); lists.Load() < 2*startupPage; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("%d lists were made while the first page was worked on, want the next pages' %d", lists.Load(), startupPage)
					break
				}
			}
		}
		sizes = append(sizes, len(page))
		for _, s := range page {
			seen[s.Namespace]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if lists.Load() != namespaces || len(seen) != namespaces {
		t.Errorf("%d lists returned Secrets of %d namespaces, want one list of each of %d", lists.Load(), len(seen), namespaces)
	}
	for ns, n := range seen {
		if n != 1 {
			t.Errorf("namespace %s's Secret was in %d pages", ns, n)
		}
	}
	if limit := badLimit.Load(); limit != 0 {
		t.Errorf("a list asked for %d Secrets, past the page's room", limit)
	}
	if len(sizes) == 0 || len(sizes) > startupListers+namespaces/startupPage || slices.Max(sizes) > startupPage {
		t.Errorf("pages of %v Secrets, want at most %d pages of at most %d", sizes, startupListers+namespaces/startupPage, startupPage)
	}
}

// TestListDeployedKeepsNamespacesWhole: a namespace's releases that fit
// a page are listed with one request; a page is sent short rather than
// the namespace be listed in two.
func TestListDeployedKeepsNamespacesWhole(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	const namespaces, each = 6, 10
	var releases []string
	for i := range namespaces * each {
		releases = append(releases, fmt.Sprintf("ns-%d/rel-%02d", i/each, i))
	}
	var lists atomic.Int32
	kube.PrependReactor("list", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		l := a.(clienttesting.ListActionImpl)
		reqs, _ := l.ListRestrictions.Labels.Requirements()
		var names []string
		for _, r := range reqs {
			if r.Key() == storage.LabelName {
				names = r.Values().List()
			}
		}
		from, _ := strconv.Atoi(l.ListOptions.Continue)
		to := min(len(names), from+int(l.ListOptions.Limit))
		list := &corev1.SecretList{}
		if to < len(names) {
			list.Continue = strconv.Itoa(to)
		}
		for _, name := range names[from:to] {
			labels := map[string]string{storage.LabelOwner: "helm", storage.LabelName: name, storage.LabelStatus: "deployed"}
			list.Items = append(list.Items, corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.GetNamespace(), Labels: labels}})
		}
		return true, list, nil
	})
	got := 0
	err := c.listDeployed(context.Background(), releases, func(page []corev1.Secret) {
		if len(page) > startupPage {
			t.Errorf("a page of %d Secrets, past %d", len(page), startupPage)
		}
		got += len(page)
	})
	if err != nil {
		t.Fatal(err)
	}
	if lists.Load() != namespaces || got != namespaces*each {
		t.Errorf("%d lists returned %d Secrets, want %d lists of %d", lists.Load(), got, namespaces, each)
	}
}

// TestListDeployedStopsOnError: a list that fails stops the startup
// lists, and says which namespace it was; the caller reads what they did
// not return one by one.
func TestListDeployedStopsOnError(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 1), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	var releases []string
	for i := range 100 {
		releases = append(releases, fmt.Sprintf("ns-%02d/rel", i))
	}
	kube.PrependReactor("list", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "ns-05" {
			return true, nil, fmt.Errorf("the server is on fire")
		}
		return true, &corev1.SecretList{Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: a.GetNamespace()}}}}, nil
	})
	done := make(chan error, 1)
	go func() { done <- c.listDeployed(context.Background(), releases, func([]corev1.Secret) {}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "namespace ns-05") || !strings.Contains(err.Error(), "on fire") {
			t.Errorf("listDeployed = %v, want the failed list of ns-05", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("listDeployed did not return after a list failed")
	}
}

// TestDeployedLists: the startup lists select, namespace by namespace,
// the names of the releases registered there, a hundred at a time, and
// leave out names no Secret can carry.
func TestDeployedLists(t *testing.T) {
	var many []string
	for i := range 150 {
		many = append(many, fmt.Sprintf("apps/r%03d", i))
	}
	tests := []struct {
		name     string
		releases []string
		want     []string // namespace: names, of each list
	}{
		{"none", nil, nil},
		{"a name in two namespaces", []string{"b/web", "a/web", "a/api", "a/web"}, []string{"a: api,web", "b: web"}},
		{"not a label value", []string{"a/web", "a/" + strings.Repeat("x", 64), "a/bad name", "a/"}, []string{"a: web"}},
		{"no namespace", []string{"/web", "web", "a/web"}, []string{"a: web"}},
		{"chunked", many, []string{"apps: 100", "apps: 50"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, l := range deployedLists(tt.releases) {
				prefix := storage.OwnedSelector + ",status=deployed,name in ("
				names, ok := strings.CutPrefix(l.selector, prefix)
				if !ok || !strings.HasSuffix(names, ")") {
					t.Fatalf("selector %q, want it to start %q", l.selector, prefix)
				}
				names = strings.TrimSuffix(names, ")")
				if n := strings.Count(names, ",") + 1; n > 2 {
					names = strconv.Itoa(n)
				}
				got = append(got, l.namespace+": "+names)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("deployedLists = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDeclareAllReadsOneByOneWhenPlanted: when most deployed release
// Secrets the startup lists would select are not what a lock reads (older
// revisions labelled deployed, planted in the release's namespace by
// whoever may create Secrets there), the lists are not made, and each
// registered release is read alone.
func TestDeclareAllReadsOneByOneWhenPlanted(t *testing.T) {
	c, _ := newTestController(t, helmRelease(nil), releaseSecret(t, "deployed", 100), nil)
	kube := c.cfg.Kube.(*fake.Clientset)
	metas := c.cfg.Metadata.(*metadatafake.FakeMetadataClient)
	for i := range 2 + startupPage {
		planted := releaseSecret(t, "deployed", i+1)
		planted.UID = types.UID(fmt.Sprintf("planted-%d", i))
		if err := kube.Tracker().Add(planted); err != nil {
			t.Fatal(err)
		}
		if err := metas.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: planted.ObjectMeta}); err != nil {
			t.Fatal(err)
		}
	}
	// Deployed revisions of the release's name in another namespace are
	// not what the lists select, and do not count.
	elsewhere := releaseSecret(t, "deployed", 1)
	elsewhere.Namespace, elsewhere.UID = "tenant", "elsewhere"
	if err := metas.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: elsewhere.ObjectMeta}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.secrets.GetStore().List()) < 2+startupPage+2 && time.Now().Before(deadline) {
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
	if st := c.state(helmReleaseKey("cattle-helm-system", "hr")); st.rel == nil || st.rel.Version != 100 {
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

// TestDeclareAllResolvesEachPage: at startup the engine resolves each
// page's releases before the next pages are read, so that the locker
// never holds every release's parsed manifest at once (at 25,000 objects
// those were most of the start's heap). Here the list after those of the
// first two pages waits until an object of an earlier page is held;
// resolved only at the end, none would be.
func TestDeclareAllResolvesEachPage(t *testing.T) {
	const namespaces = 3 * startupPage
	var secrets []*corev1.Secret
	// As against an API server, merge rules are read by Prepare: until
	// then a declared set waits, whole, to be resolved.
	rules := func(cfg *Config) { cfg.OpenAPI = noDocuments{} }
	c, _ := newTestControllerWith(t, rules, helmRelease(nil), releaseSecret(t, "deployed", 1), func(dyn *dynamicfake.FakeDynamicClient) {
		for i := range namespaces {
			ns := fmt.Sprintf("ns-%02d", i)
			hr := helmRelease(nil)
			hr.SetName("hr-" + ns)
			_ = unstructured.SetNestedField(hr.Object, ns, "spec", "release", "namespace")
			_ = unstructured.SetNestedField(hr.Object, "Prevent", "spec", "mode")
			if err := dyn.Tracker().Create(v1alpha1.Resource, hr, hr.GetNamespace()); err != nil {
				t.Fatal(err)
			}
			s := releaseSecretWith(t, "deployed", 1, func(rel map[string]any) { rel["namespace"] = ns })
			s.Namespace, s.UID = ns, types.UID("uid-"+ns)
			secrets = append(secrets, s)
		}
	})
	kube := c.cfg.Kube.(*fake.Clientset)
	metas := c.cfg.Metadata.(*metadatafake.FakeMetadataClient)
	for _, s := range secrets {
		if err := kube.Tracker().Add(s); err != nil {
			t.Fatal(err)
		}
		if err := metas.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: s.ObjectMeta}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(c.secrets.GetStore().List()) == namespaces+1 && len(c.crs.GetStore().List()) == namespaces+1, nil
	})
	if err != nil {
		t.Fatal("the caches never held every release Secret and CR")
	}
	held := func() bool {
		for _, s := range secrets {
			if c.engine.Prevents(engine.ObjectRef{GVR: cmGVR, Namespace: s.Namespace, Name: "cm"}) {
				return true
			}
		}
		return false
	}
	var lists atomic.Int32
	var heldEarly atomic.Bool
	kube.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 2*startupPage+1 {
			// The pages of the lists before are being declared.
			err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return held(), nil
			})
			heldEarly.Store(err == nil)
		}
		return false, nil, nil
	})
	c.declareAll(context.Background())
	if !heldEarly.Load() {
		t.Error("no object of the first pages was held while the later pages were listed; want each page resolved before the next is read")
	}
	for _, s := range secrets {
		if !c.engine.Prevents(engine.ObjectRef{GVR: cmGVR, Namespace: s.Namespace, Name: "cm"}) {
			t.Errorf("the ConfigMap of release %s/rel is not held after declareAll", s.Namespace)
		}
	}
}

// noDocuments is an API server that publishes no OpenAPI v3 document: the
// engine falls back to client-go's compiled merge rules once it has
// asked.
type noDocuments struct{}

func (noDocuments) PathsWithContext(context.Context) (map[string]openapi.GroupVersionWithContext, error) {
	return map[string]openapi.GroupVersionWithContext{}, nil
}
