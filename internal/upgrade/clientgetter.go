package upgrade

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clientGetter is what Helm's actions build every client from, the
// release's storage and the `lookup` of its render included: one
// rest.Config, the release's write identity's, and the release's
// namespace as the default. Helm's CLI uses genericclioptions.ConfigFlags,
// which reads kubeconfig files; this one reads nothing.
type clientGetter struct {
	config    *rest.Config
	namespace string

	// discovery is made on first use and kept, so that one upgrade
	// discovers the cluster once; a new upgrade makes a new getter and
	// sees CRDs added since.
	discoveryOnce sync.Once
	discovery     discovery.CachedDiscoveryInterface
	discoveryErr  error
}

var (
	_ genericclioptions.RESTClientGetter = (*clientGetter)(nil)
	_ clientcmd.ClientConfig             = namespaceConfig{}
)

// userAgentPrefix makes the API server name Helm ("helm") as the manager
// of what Helm's storage driver writes without a field manager of its own:
// the release Secrets. The API server takes the user agent up to its first
// "/" as the manager (fieldmanager's prefixFromUserAgent); Helm's CLIs get
// "helm" from their binary's name.
const userAgentPrefix = FieldManager + "/"

// newClientGetter returns a getter whose clients use a copy of config, with
// Helm's user agent in front of config's own. It does no I/O.
func newClientGetter(config *rest.Config, namespace string) *clientGetter {
	c := rest.CopyConfig(config)
	ua := c.UserAgent
	if ua == "" {
		ua = rest.DefaultKubernetesUserAgent()
	}
	c.UserAgent = userAgentPrefix + ua
	return &clientGetter{config: c, namespace: namespace}
}

// ToRESTConfig returns a copy of the config, which Helm's clients may
// change.
func (g *clientGetter) ToRESTConfig() (*rest.Config, error) {
	return rest.CopyConfig(g.config), nil
}

// ToDiscoveryClient returns a discovery client that caches in memory for
// the getter's life.
func (g *clientGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.discoveryOnce.Do(func() {
		var d *discovery.DiscoveryClient
		d, g.discoveryErr = discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.config))
		if g.discoveryErr == nil {
			g.discovery = memory.NewMemCacheClient(d)
		}
	})
	return g.discovery, g.discoveryErr
}

// ToRESTMapper returns a mapper over the discovery client that expands
// short names, as genericclioptions.ConfigFlags builds it.
func (g *clientGetter) ToRESTMapper() (meta.RESTMapper, error) {
	d, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(d), d, nil), nil
}

// ToRawKubeConfigLoader returns a loader that gives the release's
// namespace and the getter's config. Helm's kube client asks it for the
// namespace of objects that set none.
func (g *clientGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return namespaceConfig{config: g.config, namespace: g.namespace}
}

// namespaceConfig is a clientcmd.ClientConfig with no kubeconfig behind it.
type namespaceConfig struct {
	config    *rest.Config
	namespace string
}

// RawConfig returns an empty kubeconfig: there is no file, and the
// credentials stay in the rest.Config.
func (n namespaceConfig) RawConfig() (clientcmdapi.Config, error) {
	return *clientcmdapi.NewConfig(), nil
}

func (n namespaceConfig) ClientConfig() (*rest.Config, error) {
	return rest.CopyConfig(n.config), nil
}

// Namespace returns the release's namespace, as overridden: as if
// `--namespace` had been given.
func (n namespaceConfig) Namespace() (string, bool, error) {
	return n.namespace, true, nil
}

// ConfigAccess returns nil, as clientcmd's own DirectClientConfig does
// when no kubeconfig files are behind it.
func (n namespaceConfig) ConfigAccess() clientcmd.ConfigAccess {
	return nil
}
