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
		i := slices.Index(parts, "namespaces")
		if i < 0 || len(parts) < i+3 {
			continue
		}
		r := namespacedRead{namespace: parts[i+1], resource: parts[i+2]}
		q := u.Query()
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
// then read once for its type, with a scan that decodes only what some
// lock holds, however many untracked objects the namespace has, and no
// locked object is read alone.
func TestBurstReadsEachNamespaceOnce(t *testing.T) {
	t.Parallel()
	registration := env.Namespace(t)
	locker, err := env.StartLocker("burst", "--namespace", registration, "--controller-name", "burst", "--leader-elect=false", "--v=6")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Stop(10 * time.Second) })

	const releases, held, untracked = 8, 12, 30
	namespaces := make([]string, releases+1)
	var wg sync.WaitGroup
	for i := range namespaces {
		ns := env.Namespace(t)
		namespaces[i] = ns
		var objs strings.Builder
		for j := range untracked {
			fmt.Fprintf(&objs, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other-%02d\n  namespace: %s\ndata:\n  key: untracked\n", j, ns)
		}
		file := filepath.Join(t.TempDir(), "objects.yaml")
		if err := os.WriteFile(file, []byte(objs.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		env.Kubectl(t, "apply", "--server-side", "-f", file)
		wg.Go(func() {
			env.Helm(t, framework.Helm4, "install", "cms", framework.Chart(t, "configmaps"), "-n", ns, "--set", fmt.Sprintf("count=%d", held))
		})
	}
	wg.Wait()
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
	for _, ns := range namespaces[1:] {
		scans := reads[namespacedRead{ns, "configmaps", "scan"}]
		lists := reads[namespacedRead{ns, "configmaps", "list"}]
		gets := reads[namespacedRead{ns, "configmaps", "get"}]
		t.Logf("namespace %s: %d scans, %d lists, %d GETs of ConfigMaps", ns, scans, lists, gets)
		if scans+lists != 1 || lists != 0 {
			t.Errorf("the burst read ConfigMaps of namespace %s with %d scans and %d lists, want one scan (none at all: is --v=6 still client-go's response log?)", ns, scans, lists)
		}
		if gets != 0 {
			t.Errorf("the burst read %d ConfigMaps of namespace %s one by one, want none", gets, ns)
		}
	}
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
