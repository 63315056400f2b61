package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// RegistrationNamespace is where the shared locker looks for HelmRelease
// CRs: rancher/helm-locker's default.
const RegistrationNamespace = "cattle-helm-system"

// Locker is a running helm-locker process.
type Locker = controlplane.Process

// buildLocker compiles cmd/helm-locker into dir, static and with
// -trimpath as `make image` builds it: the same code runs, and the image
// test finds its linux/amd64 packages compiled already.
func buildLocker(ctx context.Context, dir string) (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "helm-locker")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/helm-locker")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building helm-locker: %v\n%s", err, out)
	}
	return bin, nil
}

// StartLocker runs the helm-locker binary against the control plane with
// the given extra flags, logging to a file in the test binary's folder. The
// kernel kills it if the test binary dies. A locker given a --webhook-url
// finds its webhook configuration created first, as the chart creates it.
func (e *Env) StartLocker(name string, args ...string) (*Locker, error) {
	if servesWebhook(args) {
		if err := e.EnsureWebhookConfiguration(context.Background(), args); err != nil {
			return nil, err
		}
	}
	return e.StartLockerWith(name, e.CP.Kubeconfig, args...)
}

// StartLockerWith is StartLocker for a locker that reaches the API server
// through kubeconfig, such as a Proxy's.
func (e *Env) StartLockerWith(name, kubeconfig string, args ...string) (*Locker, error) {
	return e.StartLockerBinary(name, e.lockerBin, kubeconfig, nil, args...)
}

// StartLockerBinary is StartLockerWith for another build of the locker,
// such as one taken out of its image, with environment variables added.
func (e *Env) StartLockerBinary(name, bin, kubeconfig string, env []string, args ...string) (*Locker, error) {
	// Metrics and probes listen on ports of their own, so that lockers
	// side by side do not clash; a test that reads them finds the port
	// in the locker's log (ServedAddress).
	// Only the shared locker serves ManifestLocks outside its
	// registration namespace: several lockers serving the same tenant
	// locks would each write them.
	args = append([]string{"--kubeconfig", kubeconfig, "--v=4",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--tenant-manifest-locks=false",
		// Only a locker a test gives a webhook address serves one.
		"--webhook-bind-address=0"}, args...)
	return controlplane.StartProcessEnv(name, bin, args, env, filepath.Join(e.CP.Dir, name+".log"))
}

// Register creates a HelmRelease CR in the registration namespace for the
// release and returns the CR's name.
func (e *Env) Register(t testing.TB, releaseNamespace, releaseName string) string {
	t.Helper()
	return e.RegisterIn(t, RegistrationNamespace, releaseNamespace, releaseName)
}

// RegisterIn is Register for a locker serving another registration
// namespace.
func (e *Env) RegisterIn(t testing.TB, registration, releaseNamespace, releaseName string) string {
	t.Helper()
	return e.RegisterWith(t, registration, releaseNamespace, releaseName, nil)
}

// RegisterWith is RegisterIn with more spec fields (mode, suspend, ignore).
func (e *Env) RegisterWith(t testing.TB, registration, releaseNamespace, releaseName string, spec map[string]any) string {
	t.Helper()
	name := releaseNamespace + "-" + releaseName
	fullSpec := map[string]any{"release": map[string]any{"name": releaseName, "namespace": releaseNamespace}}
	for k, v := range spec {
		fullSpec[k] = v
	}
	hr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(),
		"kind":       v1alpha1.Kind,
		"metadata":   map[string]any{"name": name, "namespace": registration},
		"spec":       fullSpec,
	}}
	if _, err := e.Dynamic.Resource(v1alpha1.Resource).Namespace(registration).Create(t.Context(), hr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating HelmRelease %s: %v", name, err)
	}
	return name
}

// Events lists the events recorded on a CR in the registration namespace.
func (e *Env) Events(t testing.TB, registration, name string) []corev1.Event {
	t.Helper()
	list, err := e.Kube.CoreV1().Events(registration).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatalf("listing events of HelmRelease %s: %v", name, err)
	}
	return list.Items
}

// HelmRelease reads a CR from the registration namespace.
func (e *Env) HelmRelease(t testing.TB, name string) *v1alpha1.HelmRelease {
	t.Helper()
	return e.HelmReleaseIn(t, RegistrationNamespace, name)
}

// HelmReleaseIn reads a CR from another registration namespace.
func (e *Env) HelmReleaseIn(t testing.TB, registration, name string) *v1alpha1.HelmRelease {
	t.Helper()
	u, err := e.Dynamic.Resource(v1alpha1.Resource).Namespace(registration).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading HelmRelease %s: %v", name, err)
	}
	hr := &v1alpha1.HelmRelease{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, hr); err != nil {
		t.Fatal(err)
	}
	return hr
}

// WaitForState waits until the CR reports state at revision version (any
// revision if version is 0).
func (e *Env) WaitForState(t testing.TB, name string, state v1alpha1.State, version int) *v1alpha1.HelmRelease {
	t.Helper()
	return e.WaitForStateIn(t, RegistrationNamespace, name, state, version)
}

// WaitForStateIn is WaitForState for another registration namespace.
func (e *Env) WaitForStateIn(t testing.TB, registration, name string, state v1alpha1.State, version int) *v1alpha1.HelmRelease {
	t.Helper()
	var hr *v1alpha1.HelmRelease
	e.Eventually(t, 60*time.Second, func() error {
		hr = e.HelmReleaseIn(t, registration, name)
		if hr.Status.State != state || (version != 0 && hr.Status.Version != version) {
			return fmt.Errorf("HelmRelease %s: state %q version %d, want %q version %d; conditions %+v", name, hr.Status.State, hr.Status.Version, state, version, hr.Status.Conditions)
		}
		return nil
	})
	return hr
}

// Eventually polls check every 20 ms until it returns nil, and fails the
// test with its last error after timeout.
func (e *Env) Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v\n%s", timeout, err, e.lockerLogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Consistently checks for d that check keeps returning nil, for properties
// like "the locker leaves this alone" that only time can show.
func (e *Env) Consistently(t testing.TB, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatalf("%v\n%s", err, e.lockerLogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Get reads an object, returning nil if it does not exist.
func (e *Env) Get(t testing.TB, apiVersion, resource, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		t.Fatal(err)
	}
	r := e.Dynamic.Resource(gv.WithResource(resource))
	var obj *unstructured.Unstructured
	if namespace == "" {
		obj, err = r.Get(t.Context(), name, metav1.GetOptions{})
	} else {
		obj, err = r.Namespace(namespace).Get(t.Context(), name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s %s/%s: %v", resource, namespace, name, err)
	}
	return obj
}

// lockerLogTail returns the end of the shared locker's log, to explain a
// failure.
func (e *Env) lockerLogTail() string {
	if e.Locker == nil {
		return ""
	}
	return LogTail(e.Locker, 40)
}

// CLIResult is what one run of a helm-locker client subcommand printed,
// and its exit status.
type CLIResult struct {
	Stdout, Stderr string
	Code           int
}

// CLI runs the helm-locker binary with args as a user types them, with
// KUBECONFIG pointing at the control plane and stdin as its input.
func (e *Env) CLI(t testing.TB, stdin string, args ...string) CLIResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.lockerBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.CP.Kubeconfig, "NO_COLOR=")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := CLIResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.Code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running helm-locker %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// LogTail is the last n lines of l's log, to explain a failure.
func LogTail(l *Locker, n int) string {
	data, _ := os.ReadFile(l.Log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last lines of %s's log ---\n%s", l.Name, strings.Join(lines, "\n"))
}

// WaitForLog waits up to timeout for l's log to match re, and returns the
// match and its groups. It stops at once if l exits first, and shows l's
// own log either way: a locker that failed to start (a flag, a port)
// then says why, where waiting on its next line would only time out.
func WaitForLog(t testing.TB, l *Locker, re *regexp.Regexp, timeout time.Duration) [][]byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		log, _ := os.ReadFile(l.Log)
		if m := re.FindSubmatch(log); m != nil {
			return m
		}
		if err := l.Exited(); err != nil {
			t.Fatalf("%v before its log matched %s\n%s", err, re, LogTail(l, 40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s's log has not matched %s\n%s", timeout, l.Name, re, LogTail(l, 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ServedAddress waits for l to listen for what ("metrics", "health
// probes") and returns the address it listens on, from its log, text or
// JSON. A locker started with
// port 0 picks a free port itself: a port picked for it beforehand may be
// taken, by a test running beside it, before it listens.
func ServedAddress(t testing.TB, l *Locker, what string) string {
	t.Helper()
	re := regexp.MustCompile(`"Serving ` + regexp.QuoteMeta(what) + `".*?"?address"?[=:]"([^"]+)"`)
	return string(WaitForLog(t, l, re, 30*time.Second)[1])
}

// LockerBinary is the path of the locker the suite built.
func (e *Env) LockerBinary() string { return e.lockerBin }
