package framework

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WebhookConfigurationName is the ValidatingWebhookConfiguration a locker
// with these flags keeps: its Lease's name and its registration namespace,
// as the chart names the one it creates.
func WebhookConfigurationName(args []string) string {
	namespace, controller, lease := flagValue(args, "namespace"), flagValue(args, "controller-name"), flagValue(args, "leader-elect-lease-name")
	if namespace == "" {
		namespace = RegistrationNamespace
	}
	if controller == "" {
		controller = "helm-locker"
	}
	if lease == "" {
		lease = controller
	}
	return lease + "." + namespace
}

// EnsureWebhookConfiguration creates the empty ValidatingWebhookConfiguration
// a locker with these flags updates, if there is none, as the chart does:
// the locker may only update it by name, never create it.
func (e *Env) EnsureWebhookConfiguration(ctx context.Context, args []string) error {
	name := WebhookConfigurationName(args)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "helm-locker-e2e"}}}
	_, err := e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", name, err)
	}
	return nil
}

// servesWebhook reports whether a locker with these flags keeps a webhook
// configuration: one given a --webhook-url, as every locker outside a
// cluster is.
func servesWebhook(args []string) bool {
	return flagValue(args, "webhook-url") != ""
}

// flagValue is the last value args give the flag, in either of the forms
// --name=value and --name value; "" if none.
func flagValue(args []string, name string) string {
	value := ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--"+name+"="):
			value = strings.TrimPrefix(a, "--"+name+"=")
		case a == "--"+name && i+1 < len(args):
			value = args[i+1]
		}
	}
	return value
}
