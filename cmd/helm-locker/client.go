package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clientFlags are the kubectl-like flags of the client subcommands.
type clientFlags struct {
	kubeconfig string
	namespace  string
}

func (c *clientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; defaults to $KUBECONFIG, then ~/.kube/config")
	cmd.Flags().StringVarP(&c.namespace, "namespace", "n", "", "namespace; defaults to the kubeconfig context's")
}

// load reads the kubeconfig as kubectl does and returns it with the
// namespace to use.
func (c *clientFlags) load() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: c.namespace}})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "helm-locker/" + version
	return cfg, ns, nil
}
