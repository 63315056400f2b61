package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// The locker's requests by verb and resource are read from the API
// server's audit log, which records the requests of the locker's own user
// and nobody else's. The locker's client metrics carry only the HTTP
// method, and the API server's request metrics count every client: the
// controller-manager and the bench too.

// lockerServiceAccount is who the locker runs as: a ServiceAccount bound
// to cluster-admin, as the locker runs in most clusters.
const lockerServiceAccount = "helm-locker"

// lockerUser is lockerServiceAccount's user name, the one the audit
// policy records.
const lockerUser = "system:serviceaccount:" + v1alpha1Namespace + ":" + lockerServiceAccount

// auditPolicy records the requests of lockerUser, without bodies, when
// they are answered, and a watch when it starts too: its end is logged
// only once it closes, and an informer's list is a watch (see
// requestsByResource).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + lockerUser + `"]
- level: None
`

// auditArgs writes the audit policy into dir and returns the API server
// flags that log by it to auditLog(dir).
func auditArgs(dir string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog(dir), "--audit-log-format=json", "--audit-log-maxsize=0"}, nil
}

func auditLog(dir string) string { return filepath.Join(dir, "audit.log") }

// lockerKubeconfig makes the locker's ServiceAccount, with its namespace
// and its binding to cluster-admin, and writes a kubeconfig with a token of
// it into dir.
func lockerKubeconfig(ctx context.Context, kube kubernetes.Interface, cfg *rest.Config, dir string) (string, error) {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: lockerServiceAccount, Namespace: v1alpha1Namespace}}
	if _, err := kube.CoreV1().ServiceAccounts(v1alpha1Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-helm-locker"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: lockerServiceAccount, Namespace: v1alpha1Namespace}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	day := int64(24 * 60 * 60)
	token, err := kube.CoreV1().ServiceAccounts(v1alpha1Namespace).CreateToken(ctx, lockerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for the locker's ServiceAccount: %w", err)
	}
	locker := rest.CopyConfig(cfg)
	locker.BearerToken = token.Status.Token
	path := filepath.Join(dir, "locker.kubeconfig")
	return path, controlplane.WriteKubeconfig(path, locker)
}

// auditEvent is what the bench reads of an audit log line.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
}

// auditOffset is the audit log's size: requests logged later are read
// from there.
func auditOffset(dir string) (int64, error) {
	fi, err := os.Stat(auditLog(dir))
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// requestsByResource counts the locker's requests logged after offset, by
// "verb resource" (a subresource after a slash, a request of no resource
// by its verb alone), and, of them, the GETs of locked objects: objects in
// the releases' namespaces but their release Secrets.
func requestsByResource(dir string, offset int64) (counts map[string]float64, lockedGets float64, err error) {
	f, err := os.Open(auditLog(dir))
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, 0, err
	}
	counts = map[string]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", auditLog(dir), err)
		}
		// Each request once: a watch when it starts, anything else when
		// it is answered.
		if ev.User.Username != lockerUser || ev.Stage != map[bool]string{true: "ResponseStarted", false: "ResponseComplete"}[ev.Verb == "watch"] {
			continue
		}
		key := ev.Verb
		if r := ev.ObjectRef; r != nil && r.Resource != "" {
			key += " " + r.Resource
			if r.Subresource != "" {
				key += "/" + r.Subresource
			}
			if ev.Verb == "get" && strings.HasPrefix(r.Namespace, "rel-") && !strings.HasPrefix(r.Name, "sh.helm.release.") {
				lockedGets++
			}
		}
		counts[key]++
	}
	return counts, lockedGets, sc.Err()
}
