package engine

import "k8s.io/apimachinery/pkg/runtime/schema"

// installOrder is the order of kinds in which Helm installs a release, and
// kubectl apply creates what a namespace or a type must exist for: the
// objects of a kind further down may depend on those above (a Pod on its
// ServiceAccount, ConfigMap and PersistentVolumeClaim; a RoleBinding on its
// Role). Namespaces and CRDs come before everything, since no object can
// be created in a namespace, or of a custom kind, before they exist.
var installOrder = map[string]int{}

func init() {
	for i, kind := range []string{
		"Namespace", "CustomResourceDefinition", "PriorityClass", "NetworkPolicy", "ResourceQuota",
		"LimitRange", "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret",
		"SecretList", "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
		"ClusterRole", "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role",
		"RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod",
		"ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet",
		"Job", "CronJob", "IngressClass", "Ingress", "APIService", "MutatingWebhookConfiguration",
		"ValidatingWebhookConfiguration",
	} {
		installOrder[kind] = i
	}
}

// CreationOrder ranks a kind in the order objects are created: Namespaces,
// then CRDs, then Helm's install order of kinds, then every other kind
// (custom resources among them). Objects are created and recreated from
// the lowest rank up, and should be deleted (pruned) from the highest
// down.
func CreationOrder(kind schema.GroupKind) int {
	if rank, ok := installOrder[kind.Kind]; ok {
		return rank
	}
	return len(installOrder)
}
