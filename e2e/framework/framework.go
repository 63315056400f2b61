// Package framework is the e2e harness: one real control plane per test
// binary, a fresh namespace per test, and the real helm and kubectl CLIs
// pointed at it.
package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// Env is the shared state of one test binary.
type Env struct {
	Tools   controlplane.Tools
	CP      *controlplane.ControlPlane
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Locker is the helm-locker process shared by the tests, serving
	// RegistrationNamespace; nil under Options.NoSharedLocker.
	Locker *Locker
	// helmHome isolates the helm CLIs from the user's own config and cache.
	helmHome  string
	lockerBin string
}

// Main starts the control plane, runs the tests and stops it again, and is
// meant to be called from TestMain. It exits the process with the tests'
// status; a control plane that will not start fails the whole binary.
func Main(m *testing.M, env **Env) {
	MainWith(m, env, Options{})
}

// Options sets up a test binary whose tests need a control plane unlike the
// suite's, such as one they take down, or lockers unlike the shared one.
type Options struct {
	// APIServerArgs are extra kube-apiserver flags (see
	// controlplane.Options).
	APIServerArgs []string
	// NoSharedLocker starts no shared locker, for tests that start every
	// locker themselves. The HelmRelease CRD then exists only once one of
	// theirs has installed it.
	NoSharedLocker bool
}

// MainWith is Main with a control plane and shared locker set up by opts.
func MainWith(m *testing.M, env **Env, opts Options) {
	os.Exit(run(m, env, opts))
}

func run(m *testing.M, envp **Env, opts Options) int {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tools, err := controlplane.FindTools(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// The "helm-locker-e2e-" prefix is in every argument list of the
	// processes started here; `make test` greps for it to prove none leak.
	dir, err := os.MkdirTemp("", "helm-locker-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	cp, err := controlplane.StartWithOptions(ctx, tools, dir, controlplane.Options{APIServerArgs: opts.APIServerArgs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting control plane:", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping control plane:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "e2e: control plane ready in %s, kubeconfig %s\n", time.Since(start).Round(time.Millisecond), cp.Kubeconfig)
	env := &Env{Tools: tools, CP: cp, helmHome: filepath.Join(dir, "helm")}
	if env.Kube, err = kubernetes.NewForConfig(cp.Config); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if env.Dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if env.lockerBin, err = buildLocker(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if !opts.NoSharedLocker {
		// The shared locker answers Prevent mode's webhook, which the
		// API server calls back over loopback TLS.
		addr, err := controlplane.FreeAddress()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		webhookAddr := addr.String()
		// Tests of Upgrade mode expect an upgrade within seconds of
		// the last one, not after the minute of
		// --rerender-upgrade-interval's default.
		if env.Locker, err = env.StartLocker("locker", "--namespace", RegistrationNamespace, "--tenant-manifest-locks",
			"--webhook-bind-address="+webhookAddr, "--webhook-url=https://"+webhookAddr+"/validate", "--prevent-exempt-groups="+ExemptGroup,
			"--rerender-upgrade-interval=2s", fmt.Sprintf("--artifact-max-files=%d", SharedArtifactMaxFiles)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer func() { _ = env.Locker.Stop(10 * time.Second) }()
		// The locker installs the HelmRelease and ManifestLock CRDs at
		// startup; tests create CRs right away.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, r := range []schema.GroupVersionResource{v1alpha1.Resource, mlv1.Resource} {
				if _, err := env.Dynamic.Resource(r).Namespace(RegistrationNamespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: the locker did not install its CRDs:", err)
			return 1
		}
	}
	*envp = env
	return m.Run()
}

// Namespace creates a namespace with a unique name for one test. It is not
// deleted afterwards: the whole control plane goes away with the test
// binary, and the namespace controller would only spend, while other tests
// run, the CPU the suite shares.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-") + "-" + randomSuffix()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// HelmVersion picks one of the two helm CLIs.
type HelmVersion int

// The helm CLIs under test. Helm 3 applies with client-side three-way
// strategic merge; Helm 4 applies with server-side apply.
const (
	Helm3 HelmVersion = 3
	Helm4 HelmVersion = 4
)

// HelmVersions lists both CLIs, for tests that run once with each.
var HelmVersions = []HelmVersion{Helm3, Helm4}

func (v HelmVersion) String() string { return fmt.Sprintf("helm%d", v) }

// Helm runs the helm CLI against the control plane and fails the test if it
// fails. It returns stdout.
func (e *Env) Helm(t testing.TB, v HelmVersion, args ...string) string {
	t.Helper()
	out, err := e.HelmE(t, v, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// HelmE is Helm for tests that expect the command may fail.
func (e *Env) HelmE(t testing.TB, v HelmVersion, args ...string) (string, error) {
	t.Helper()
	return e.HelmWithEnv(t, v, nil, args...)
}

// HelmWithEnv is HelmE with extra environment variables, such as
// HELM_DRIVER.
func (e *Env) HelmWithEnv(t testing.TB, v HelmVersion, extraEnv []string, args ...string) (string, error) {
	t.Helper()
	bin := e.Tools.Helm3
	if v == Helm4 {
		bin = e.Tools.Helm4
	}
	return e.run(t, bin, append([]string{"--kubeconfig", e.CP.Kubeconfig}, args...), append([]string{
		"HELM_CACHE_HOME=" + filepath.Join(e.helmHome, v.String(), "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(e.helmHome, v.String(), "config"),
		"HELM_DATA_HOME=" + filepath.Join(e.helmHome, v.String(), "data"),
	}, extraEnv...))
}

// Kubectl runs the kubectl CLI against the control plane and fails the test
// if it fails. It returns stdout.
func (e *Env) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.KubectlE(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlE is Kubectl for a command that may fail; the error holds its
// output.
func (e *Env) KubectlE(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return e.KubectlWithEnv(t, nil, args...)
}

// KubectlWithEnv is KubectlE with more environment, such as KUBE_EDITOR.
func (e *Env) KubectlWithEnv(t testing.TB, extraEnv []string, args ...string) (string, error) {
	t.Helper()
	return e.run(t, e.Tools.Kubectl, append([]string{"--kubeconfig", e.CP.Kubeconfig}, args...), extraEnv)
}

// ExemptGroup is the shared locker's break-glass group
// (--prevent-exempt-groups).
const ExemptGroup = "e2e:break-glass"

// CreateChart runs `helm create`, the chart most real charts start from,
// and returns its path.
func (e *Env) CreateChart(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	e.Helm(t, Helm3, "create", dir)
	return dir
}

func (e *Env) run(t testing.TB, bin string, args, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Chart returns the path of a chart under e2e/testdata/charts.
func Chart(t testing.TB, name string) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "e2e", "testdata", "charts", name)
}

// FreeAddress returns a loopback address with a port free now, for a
// locker's metrics, probes or webhook that a test reads (see
// controlplane.FreeAddress).
func FreeAddress(t testing.TB) string {
	t.Helper()
	addr, err := controlplane.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	return addr.String()
}

// HTTPGet returns the status code and body of a GET of url; code 0 and the
// error if it could not be sent.
func HTTPGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
