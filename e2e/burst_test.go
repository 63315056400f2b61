package e2e

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// responseLine is client-go's log of a response at --v=6: its verb and URL.
var responseLine = regexp.MustCompile(`"Response"[^\n]*? verb="([A-Z]+)" url="([^"]+)"`)

// namespacedRead is a read the locker sent for the objects of one
// namespace: a list, a scan (a watch that sends the current objects
// first), or a GET of one object.
type namespacedRead struct {
	namespace, resource, kind string
}

// readsOf sorts the requests a locker logged at --v=6 into reads of
// namespaced objects, by namespace, resource and kind of read.
func readsOf(t *testing.T, log string) map[namespacedRead]int {
	t.Helper()
	out := map[namespacedRead]int{}
	for _, m := range responseLine.FindAllStringSubmatch(log, -1) {
		u, err := url.Parse(m[2])
		if err != nil {
			t.Fatalf("the locker logged a URL that does not parse: %s", m[2])
		}
		// /api/v1/namespaces/NS/RESOURCE[/NAME] or
		// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME].
		parts := strings.Split(strings.Trim(u.Path, "/"), "/")
		q := u.Query()
		i := slices.Index(parts, "namespaces")
		if i < 0 && m[1] == "GET" && q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true" {
			// An informer's list of every namespace, as a watch:
			// at its start, and when it lists again (a relist).
			out[namespacedRead{resource: parts[len(parts)-1], kind: "scan"}]++
			continue
		}
		if i < 0 || len(parts) < i+3 {
			continue
		}
		r := namespacedRead{namespace: parts[i+1], resource: parts[i+2]}
		switch {
		case m[1] != "GET":
			continue
		case len(parts) == i+4:
			r.kind = "get"
		case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			r.kind = "scan"
		case q.Get("watch") == "true":
			continue
		default:
			r.kind = "list"
		}
		out[r]++
	}
	return out
}

// TestBurstReadsEachNamespaceOnce: HelmReleases registered in a burst
// after the informers of their types listed (CRs a GitOps tool applies at
// once after the locker started) find their objects missing from the
// caches, which keep no object no lock held. Each release's namespace is
// then read at most once for its type, with a scan that decodes only what
// some lock holds, however many untracked objects the namespace has, or
// not at all, where the scans of the type have read as much as a list of
// it would and its informer lists it again (a relist); no locked object is
// read alone.
func TestBurstReadsEachNamespaceOnce(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	locker, err := env.StartLocker("burst", "--namespace", registration, "--controller-name", "burst", "--leader-elect=false", "--v=6")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })

	const releases, held, untracked = 8, 12, 30
	namespaces := burstNamespaces(t, releases+1, untracked, func(j int, ns string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other-%02d\n  namespace: %s\ndata:\n  key: untracked\n", j, ns)
	}, func(ns string) {
		env.Helm(t, framework.Helm4, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", fmt.Sprintf("count=%d", held))
	})
	// The first release starts the ConfigMap informer, whose list keeps
	// none of the others' objects.
	first := env.RegisterIn(t, registration, namespaces[0], "cms")
	env.WaitForStateIn(t, registration, first, v1alpha1.StateDeployed, 1)
	var crs []string
	for _, ns := range namespaces[1:] {
		crs = append(crs, env.RegisterIn(t, registration, ns, "cms"))
	}
	for _, cr := range crs {
		env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	}

	reads := readsOfLocker(t, locker.Log)
	// The informer's own list, at its start, and its relists.
	read := reads[namespacedRead{"", "configmaps", "scan"}]
	t.Logf("every namespace: %d lists of ConfigMaps by the informer (a watch sending the current objects first), the first at its start", read)
	read += checkNamespaceReads(t, reads, "configmaps", namespaces[1:], 1)
	// The first release's objects came with the informer's first list;
	// the others' with a scan or a relist.
	if read < 2 {
		t.Errorf("the locker logged %d reads of ConfigMaps, want at least 2: is --v=6 still client-go's response log?", read)
	}
}

// checkNamespaceReads fails t for a namespace whose objects of resource
// were listed, read alone, or scanned more than maxScans times, and
// returns the scans of all of them.
func checkNamespaceReads(t *testing.T, reads map[namespacedRead]int, resource string, namespaces []string, maxScans int) int {
	t.Helper()
	scanned := 0
	for _, ns := range namespaces {
		scans := reads[namespacedRead{ns, resource, "scan"}]
		lists := reads[namespacedRead{ns, resource, "list"}]
		gets := reads[namespacedRead{ns, resource, "get"}]
		t.Logf("namespace %s: %d scans, %d lists, %d GETs of %s", ns, scans, lists, gets, resource)
		if scans > maxScans || lists != 0 {
			t.Errorf("the locker read %s of namespace %s with %d scans and %d lists, want at most %d scans and no list", resource, ns, scans, lists, maxScans)
		}
		if gets != 0 {
			t.Errorf("the locker read %d %s of namespace %s one by one, want none", gets, resource, ns)
		}
		scanned += scans
	}
	return scanned
}

// burstNamespaces makes n namespaces of the test's own, applies untracked
// objects to each (object renders the jth for a namespace), and runs each
// of installs in each namespace, all installs at once.
func burstNamespaces(t *testing.T, n, untracked int, object func(j int, ns string) string, installs ...func(ns string)) []string {
	t.Helper()
	namespaces := make([]string, n)
	var wg sync.WaitGroup
	for i := range namespaces {
		ns := env.Namespace(t)
		namespaces[i] = ns
		var objs strings.Builder
		for j := range untracked {
			objs.WriteString("---\n" + object(j, ns))
		}
		file := filepath.Join(t.TempDir(), "objects.yaml")
		if err := os.WriteFile(file, []byte(objs.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		env.Kubectl(t, "apply", "--server-side", "-f", file)
		for _, install := range installs {
			wg.Go(func() { install(ns) })
		}
	}
	wg.Wait()
	return namespaces
}

// readsOfLocker reads a locker's log so far into its reads of namespaced
// objects.
func readsOfLocker(t *testing.T, path string) map[namespacedRead]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readsOf(t, string(data))
}

// TestBurstRelists: once the scans of a type have read as many objects as
// its informer's last list did, sets declared after that list wait for the
// informer to list the type again (one relist for all of them) rather
// than scan their namespaces, and the relist finds their objects. Widgets,
// of a CRD of the test's own, are the type: the informer's list holds the
// test's objects alone, so when the scans outgrow it is known. An edit of
// a locked Widget made during the burst is still reverted, and no locked
// object is read alone.
func TestBurstRelists(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	group := registration + ".example.com"
	// The release is named after the namespace: its ClusterRole is
	// cluster-wide, and every run of the test needs its own.
	env.Helm(t, framework.Helm3, "install", registration, framework.Chart(t, "crds"), "-n", registration, "--set", "group="+group)
	locker, err := env.StartLocker("relists", "--namespace", registration, "--controller-name", "relists", "--leader-elect=false", "--v=6")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })

	// Each namespace: 30 untracked Widgets, and releases a and b of 12.
	// The informer lists 8 × 54 Widgets, fewer than a scan counts for (a
	// page, 500): in each burst the first sets scan, and those after
	// wait for relists.
	const spaces, held, untracked = 8, 12, 30
	install := func(release string) func(ns string) {
		return func(ns string) {
			env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "widgets"), "-n", ns, "--set", fmt.Sprintf("group=%s,count=%d", group, held))
		}
	}
	namespaces := burstNamespaces(t, spaces, untracked, func(j int, ns string) string {
		return fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: other-%02d\n  namespace: %s\nspec:\n  size: 1\n", group, j, ns)
	}, install("a"), install("b"))
	first := env.RegisterIn(t, registration, namespaces[0], "a")
	env.WaitForStateIn(t, registration, first, v1alpha1.StateDeployed, 1)
	var crs []string
	for _, ns := range namespaces[1:] {
		crs = append(crs, env.RegisterIn(t, registration, ns, "a"))
	}
	for _, cr := range crs {
		env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	}
	crs = nil
	for _, ns := range namespaces {
		crs = append(crs, env.RegisterIn(t, registration, ns, "b"))
	}
	widgetRevertedInBurst(t, registration, group, namespaces[1], crs)

	reads := readsOfLocker(t, locker.Log)
	lists := reads[namespacedRead{"", "widgets", "scan"}]
	t.Logf("every namespace: %d lists of Widgets by the informer, the first at its start", lists)
	if lists < 2 {
		t.Errorf("the informer listed Widgets %d times, want its first list and at least one relist", lists)
	}
	scanned := checkNamespaceReads(t, reads, "widgets", namespaces, 2)
	// The first sets of each burst scan (a scan counts as more than the
	// list); the rest wait for relists, also when the controller syncs
	// them again before their relist is stored.
	if scanned > 4 {
		t.Errorf("the bursts scanned Widgets %d times in all, want at most 4: sets that wait for a relist should not scan", scanned)
	}
}

// TestBurstDeclaredTogether: HelmReleases registered in a burst of at
// least 16 after the start are declared together, as a start declares
// them: their release Secrets are listed, not read one by one, and their
// objects come with one list of the type for all of them, not with a scan
// of each namespace. Each lock's status is written about once, as at a
// start, and an edit of a held object made during the burst is still
// reverted. On a busy machine a CR or two of the burst may come after the
// gathering was taken, and be synced alone, as a lone CR is: the test
// allows two.
func TestBurstDeclaredTogether(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	locker, err := env.StartLocker("together", "--namespace", registration, "--controller-name", "together", "--leader-elect=false", "--v=6")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })

	// Releases a, b and c of 12 ConfigMaps in each of 9 namespaces,
	// beside 30 untracked ones: the first release starts the informers,
	// and the 26 others come in one burst, 10 more than the fewest
	// gathered together (arrivalBatch), so that stragglers leave a
	// batch.
	const spaces, held, untracked, stragglers = 9, 12, 30, 2
	a, b, c := registration+"-a", registration+"-b", registration+"-c"
	install := func(release string) func(ns string) {
		return func(ns string) {
			env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "configmaps"), "-n", ns, "--set", fmt.Sprintf("count=%d", held))
		}
	}
	namespaces := burstNamespaces(t, spaces, untracked, func(j int, ns string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other-%02d\n  namespace: %s\ndata:\n  key: untracked\n", j, ns)
	}, install(a), install(b), install(c))
	first := env.RegisterIn(t, registration, namespaces[0], a)
	env.WaitForStateIn(t, registration, first, v1alpha1.StateDeployed, 1)
	before := readsOfLocker(t, locker.Log)

	// Created at once, as an apply on an idle API server would: one
	// after another on a machine busy with other tests, they could come
	// further apart than the gathering waits.
	releases := [][2]string{{namespaces[0], b}, {namespaces[0], c}}
	for _, ns := range namespaces[1:] {
		releases = append(releases, [2]string{ns, a}, [2]string{ns, b}, [2]string{ns, c})
	}
	crs := registerAtOnce(t, registration, releases)
	// During the burst: a held ConfigMap is changed.
	env.Kubectl(t, "patch", "-n", namespaces[1], "configmap", a+"-0", "--type", "merge", "-p", `{"data":{"key":"edited"}}`)
	for _, cr := range crs {
		env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	}
	env.Eventually(t, 30*time.Second, func() error {
		cm := env.Get(t, "v1", "configmaps", namespaces[1], a+"-0")
		if v, _, _ := unstructured.NestedString(cm.Object, "data", "key"); v != "declared" {
			return fmt.Errorf("ConfigMap %s-0 data.key = %q, want %q", a, v, "declared")
		}
		return nil
	})

	after := readsOfLocker(t, locker.Log)
	logGatherings(t, locker.Log)
	relists := after[namespacedRead{"", "configmaps", "scan"}] - before[namespacedRead{"", "configmaps", "scan"}]
	t.Logf("the burst: %d lists of ConfigMaps of every namespace", relists)
	if relists < 1 || relists > 2 {
		t.Errorf("the burst listed the ConfigMaps of every namespace %d times, want 1 or 2", relists)
	}
	if scans := checkNamespaceReads(t, after, "configmaps", namespaces[1:], stragglers); scans > stragglers {
		t.Errorf("the burst scanned the ConfigMaps of its namespaces %d times, want %d at most (stragglers): one list serves them all", scans, stragglers)
	}
	gets := 0
	for _, ns := range namespaces {
		gets += after[namespacedRead{ns, "secrets", "get"}] - before[namespacedRead{ns, "secrets", "get"}]
	}
	if gets > stragglers {
		t.Errorf("the locker read %d release Secrets one by one, want %d at most (stragglers): the burst lists them", gets, stragglers)
	}
	// A list of a namespace's release Secrets for each gathering: on a
	// busy machine the burst may come in two.
	lists := 0
	for _, ns := range namespaces[1:] {
		n := after[namespacedRead{ns, "secrets", "list"}] - before[namespacedRead{ns, "secrets", "list"}]
		lists += n
		if n > 2 {
			t.Errorf("the burst listed the release Secrets of namespace %s %d times, want 2 at most", ns, n)
		}
	}
	if lists == 0 {
		t.Error("the burst listed no release Secrets of its namespaces: it read them some other way")
	}
	writes := statusWrites(t, locker.Log)
	for _, cr := range crs {
		t.Logf("%s: %d status writes", cr, writes[cr])
		if writes[cr] > 2 {
			t.Errorf("the locker wrote the status of %s %d times in the burst, want at most 2", cr, writes[cr])
		}
	}
}

// statusLine is a write of a HelmRelease's status in client-go's log of a
// response at --v=6.
var statusLine = regexp.MustCompile(`"Response"[^\n]*? verb="(?:PATCH|PUT)" url="[^"]*/helmreleases/([^/"?]+)/status`)

// statusWrites counts the status writes a locker logged, by HelmRelease.
func statusWrites(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range statusLine.FindAllStringSubmatch(string(data), -1) {
		out[m[1]]++
	}
	return out
}

// gatheringLine is the locker's log of a gathering of HelmReleases it
// declared together.
var gatheringLine = regexp.MustCompile(`[^\n]*"(?:Gathered|Declared) the HelmReleases that arrived[^\n]*`)

// logGatherings logs the gatherings of HelmReleases a locker took, which
// say how a burst that was not declared as one came apart.
func logGatherings(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range gatheringLine.FindAllString(string(data), -1) {
		t.Log(line)
	}
}

// ledByStragglers reports whether a locker's first gathering of
// HelmReleases was too small to be declared together: a burst that came
// apart, whose first locks were synced alone.
func ledByStragglers(t *testing.T, path string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first := gatheringLine.FindString(string(data))
	return strings.Contains(first, `"Gathered the HelmReleases`) && strings.Contains(first, "together=false")
}

// TestBurstIntoIdleLocker: a burst of HelmReleases into a locker that
// holds nothing yet (every release registered in one apply after it was
// installed) holds objects of types no informer watches, and whose merge
// rules the engine has not read: they are resolved page by page as they
// are declared, and each type's informer starts once the gathering is
// declared, so that its first list finds every set's objects tracked and
// it lists once (twice where locks gathered alone before the rest started
// it). An edit of a locked Widget made during the burst is reverted, and
// no locked object is read alone, not even by a lock synced while the
// gathering holds its type's informer. (A burst this small is
// declared before a list would have passed it anyway: the engine's
// TestHoldInformersDeclaredInBatches holds the hold itself.)
func TestBurstIntoIdleLocker(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	group := registration + ".example.com"
	env.Helm(t, framework.Helm3, "install", registration, framework.Chart(t, "crds"), "-n", registration, "--set", "group="+group)
	locker, err := env.StartLocker("idle", "--namespace", registration, "--controller-name", "idle", "--leader-elect=false", "--v=6")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })

	// Releases a, b and c of 12 Widgets in each of 7 namespaces, beside
	// 30 untracked ones: 21 in one burst, 5 more than the fewest
	// gathered together.
	const spaces, held, untracked, stragglers = 7, 12, 30, 2
	install := func(release string) func(ns string) {
		return func(ns string) {
			env.Helm(t, framework.Helm4, "install", release, framework.Chart(t, "widgets"), "-n", ns, "--set", fmt.Sprintf("group=%s,count=%d", group, held))
		}
	}
	namespaces := burstNamespaces(t, spaces, untracked, func(j int, ns string) string {
		return fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: other-%02d\n  namespace: %s\nspec:\n  size: 1\n", group, j, ns)
	}, install("a"), install("b"), install("c"))
	var releases [][2]string
	for _, ns := range namespaces {
		releases = append(releases, [2]string{ns, "a"}, [2]string{ns, "b"}, [2]string{ns, "c"})
	}
	crs := registerAtOnce(t, registration, releases)
	widgetRevertedInBurst(t, registration, group, namespaces[1], crs)

	reads := readsOfLocker(t, locker.Log)
	logGatherings(t, locker.Log)
	lists := reads[namespacedRead{"", "widgets", "scan"}]
	t.Logf("the burst: %d lists of the Widgets of every namespace", lists)
	// On a busy machine a lock or two of the burst may be gathered alone
	// before the rest, and start the informer before the rest are
	// declared: the gathering then has it list once more.
	want := 1
	if ledByStragglers(t, locker.Log) {
		want = 2
	}
	if lists < 1 || lists > want {
		t.Errorf("the informer listed Widgets %d times, want %d at most: started after the gathering was declared, its first list finds them all", lists, want)
	}
	if scans := checkNamespaceReads(t, reads, "widgets", namespaces, stragglers); scans > stragglers {
		t.Errorf("the burst scanned the Widgets of its namespaces %d times, want %d at most (stragglers)", scans, stragglers)
	}
}

// registerAtOnce creates a HelmRelease in registration for each of
// releases (namespace and name), named namespace-name, all at once as an
// apply on an idle API server would, and returns their names.
func registerAtOnce(t *testing.T, registration string, releases [][2]string) []string {
	t.Helper()
	var crs []string
	var wg sync.WaitGroup
	for _, r := range releases {
		name := r[0] + "-" + r[1]
		crs = append(crs, name)
		hr := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
			"metadata": map[string]any{"name": name, "namespace": registration},
			"spec":     map[string]any{"release": map[string]any{"name": r[1], "namespace": r[0]}},
		}}
		wg.Go(func() {
			if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(registration).Create(t.Context(), hr, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating HelmRelease %s: %v", name, err)
			}
		})
	}
	wg.Wait()
	return crs
}

// widgetRevertedInBurst changes release a's Widget a-0 in ns while the
// burst of crs is locked, waits for every one of them to be Deployed, and
// for the Widget to be as the chart declares it.
func widgetRevertedInBurst(t *testing.T, registration, group, ns string, crs []string) {
	t.Helper()
	env.Kubectl(t, "patch", "-n", ns, "widgets."+group, "a-0", "--type", "merge", "-p", `{"spec":{"size":99}}`)
	for _, cr := range crs {
		env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	}
	env.Eventually(t, 30*time.Second, func() error {
		w := env.Get(t, group+"/v1", "widgets", ns, "a-0")
		if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
			return fmt.Errorf("Widget a-0 spec.size = %d, want 3", size)
		}
		return nil
	})
}
