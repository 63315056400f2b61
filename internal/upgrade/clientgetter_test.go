package upgrade

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// apiServer serves the discovery of a cluster with ConfigMaps alone, and
// records who asked.
type apiServer struct {
	mu       sync.Mutex
	requests []request
}

type request struct{ path, user, agent string }

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, request{r.URL.Path, r.Header.Get("Impersonate-User"), r.UserAgent()})
	s.mu.Unlock()
	var body any
	switch r.URL.Path {
	case "/api":
		body = metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}}
	case "/apis":
		body = metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	case "/api/v1":
		body = metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", SingularName: "configmap", Namespaced: true, Kind: "ConfigMap", ShortNames: []string{"cm"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}},
		}}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

func (s *apiServer) seen() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.requests...)
}

const writer = "system:serviceaccount:apps:release-writer"

func newTestGetter(t *testing.T) (*clientGetter, *apiServer, *rest.Config) {
	t.Helper()
	api := &apiServer{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, UserAgent: "helm-locker/v1.2.3", Impersonate: rest.ImpersonationConfig{UserName: writer}}
	return newClientGetter(cfg, "apps"), api, cfg
}

// TestClientGetter holds what Helm builds every client from to the
// release's identity and namespace, and to no I/O until a client is used.
func TestClientGetter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(t *testing.T, g *clientGetter, api *apiServer, given *rest.Config)
	}{
		{"constructing reads nothing", func(t *testing.T, g *clientGetter, api *apiServer, _ *rest.Config) {
			_, _ = g.ToRESTConfig()
			_ = g.ToRawKubeConfigLoader()
			if _, err := g.ToDiscoveryClient(); err != nil {
				t.Fatal(err)
			}
			if _, err := g.ToRESTMapper(); err != nil {
				t.Fatal(err)
			}
			if got := api.seen(); len(got) != 0 {
				t.Errorf("requests before any client was used: %+v", got)
			}
		}},
		{"rest config impersonates, as Helm", func(t *testing.T, g *clientGetter, _ *apiServer, given *rest.Config) {
			c, err := g.ToRESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if c.Host != given.Host || c.Impersonate.UserName != writer {
				t.Errorf("ToRESTConfig() = host %q impersonating %q, want %q impersonating %q", c.Host, c.Impersonate.UserName, given.Host, writer)
			}
			if want := "helm/helm-locker/v1.2.3"; c.UserAgent != want {
				t.Errorf("user agent %q, want %q: the API server names the manager of writes without one after it", c.UserAgent, want)
			}
			if given.UserAgent != "helm-locker/v1.2.3" {
				t.Errorf("the caller's config changed: user agent %q", given.UserAgent)
			}
		}},
		{"rest config is a copy", func(t *testing.T, g *clientGetter, _ *apiServer, _ *rest.Config) {
			c, _ := g.ToRESTConfig()
			c.Impersonate.UserName = "admin"
			c.Host = "https://elsewhere"
			again, _ := g.ToRESTConfig()
			if again.Impersonate.UserName != writer || again.Host == "https://elsewhere" {
				t.Errorf("a change to one ToRESTConfig() showed in the next: %+v", again)
			}
		}},
		{"loader gives the release namespace", func(t *testing.T, g *clientGetter, _ *apiServer, _ *rest.Config) {
			ns, overridden, err := g.ToRawKubeConfigLoader().Namespace()
			if err != nil || ns != "apps" || !overridden {
				t.Errorf("Namespace() = %q, %t, %v; want \"apps\", true, nil", ns, overridden, err)
			}
		}},
		{"loader's config impersonates", func(t *testing.T, g *clientGetter, _ *apiServer, _ *rest.Config) {
			c, err := g.ToRawKubeConfigLoader().ClientConfig()
			if err != nil || c.Impersonate.UserName != writer {
				t.Errorf("ClientConfig() = %+v, %v; want one impersonating %q", c, err, writer)
			}
			raw, err := g.ToRawKubeConfigLoader().RawConfig()
			if err != nil || len(raw.AuthInfos) != 0 || len(raw.Clusters) != 0 {
				t.Errorf("RawConfig() = %+v, %v; want an empty kubeconfig", raw, err)
			}
		}},
		{"one discovery client, cached", func(t *testing.T, g *clientGetter, _ *apiServer, _ *rest.Config) {
			a, _ := g.ToDiscoveryClient()
			b, _ := g.ToDiscoveryClient()
			if a != b {
				t.Error("ToDiscoveryClient() returned two clients; Helm would discover the cluster again for each")
			}
		}},
		{"mapper maps kinds and short names as the identity", func(t *testing.T, g *clientGetter, api *apiServer, _ *rest.Config) {
			m, err := g.ToRESTMapper()
			if err != nil {
				t.Fatal(err)
			}
			mapping, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if want := (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); mapping.Resource != want || mapping.Scope.Name() != "namespace" {
				t.Errorf("RESTMapping(ConfigMap) = %v scoped %q, want %v scoped namespace", mapping.Resource, mapping.Scope.Name(), want)
			}
			gvr, err := m.ResourceFor(schema.GroupVersionResource{Resource: "cm"})
			if err != nil || gvr.Resource != "configmaps" {
				t.Errorf("ResourceFor(cm) = %v, %v; want configmaps", gvr, err)
			}
			got := api.seen()
			if len(got) == 0 {
				t.Fatal("the mapper discovered nothing from the server")
			}
			for _, r := range got {
				if r.user != writer || !strings.HasPrefix(r.agent, "helm/") {
					t.Errorf("discovery request %s as %q with user agent %q, want as %q with helm's", r.path, r.user, r.agent, writer)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, api, given := newTestGetter(t)
			tc.check(t, g, api, given)
		})
	}
}

func TestClientGetterUserAgent(t *testing.T) {
	for _, tc := range []struct {
		name, given string
		want        string
	}{
		{"the caller's kept after helm's", "helm-locker/v1.2.3 (linux/amd64)", "helm/helm-locker/v1.2.3 (linux/amd64)"},
		{"client-go's default when the caller set none", "", "helm/" + rest.DefaultKubernetesUserAgent()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newClientGetter(&rest.Config{Host: "https://127.0.0.1:1", UserAgent: tc.given}, "apps")
			c, _ := g.ToRESTConfig()
			if diff := cmp.Diff(tc.want, c.UserAgent); diff != "" {
				t.Errorf("user agent (-want +got):\n%s", diff)
			}
		})
	}
}
