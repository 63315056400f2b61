package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControlPlane is a running etcd and kube-apiserver. Stop it with Stop; if
// the process that started it dies first, the kernel kills both (see
// processAttrs), so a crashed or interrupted test run leaves nothing behind.
type ControlPlane struct {
	// Dir holds the data, certificates, logs and the kubeconfig.
	Dir string
	// Kubeconfig is the path of a kubeconfig for a cluster admin.
	Kubeconfig string
	// Config is the same credentials as a rest.Config.
	Config *rest.Config

	stopOnce sync.Once
	procs    []*Process
}

// Start runs etcd and kube-apiserver from tools, keeping all their state
// under dir, and returns once /readyz answers. On error it stops whatever it
// had started.
func Start(ctx context.Context, tools Tools, dir string) (_ *ControlPlane, err error) {
	cp := &ControlPlane{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := cp.start("etcd", tools.Etcd,
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		// Test data is thrown away with the directory; fsync only slows
		// every write down on a shared disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	); err != nil {
		return nil, err
	}

	token, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "service-account.key")
	if err := writeRSAKey(keyFile); err != nil {
		return nil, err
	}
	port := strconv.Itoa(ports[2])
	if err := cp.start("kube-apiserver", tools.KubeAPIServer,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+port,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+keyFile,
		"--service-account-signing-key-file="+keyFile,
		"--service-cluster-ip-range=10.0.0.0/16",
		// No controller-manager runs to make the token Secrets this
		// admission plugin waits for.
		"--disable-admission-plugins=ServiceAccount",
	); err != nil {
		return nil, err
	}

	cp.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + port,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1, // tests measure the locker, not client-side throttling
	}
	if err := writeKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	return cp, nil
}

// start launches one binary, logging to <dir>/<name>.log.
func (cp *ControlPlane) start(name, path string, args ...string) error {
	p, err := StartProcess(name, path, args, filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	return nil
}

// processAttrs makes the kernel SIGKILL a child when the thread that started
// it exits. Go's runtime does not retire threads that have not been locked,
// so in practice this fires when the test binary or the local-cluster
// command dies, however it dies, including on SIGKILL or a test timeout.
func processAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// waitReady polls /readyz until it answers ok, a process exits, or the
// timeout passes.
func (cp *ControlPlane) waitReady(ctx context.Context, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		for _, p := range cp.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited before the API server was ready: %v\n%s", p.Name, p.err, tail(p.Log))
			default:
			}
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s: %v\n%s", timeout, lastErr, tail(filepath.Join(cp.Dir, "kube-apiserver.log")))
		case <-tick.C:
		}
	}
}

// PIDs returns the process IDs of etcd and kube-apiserver, for tests that
// prove they do not outlive their parent.
func (cp *ControlPlane) PIDs() []int {
	var pids []int
	for _, p := range cp.procs {
		pids = append(pids, p.PID())
	}
	return pids
}

// Stop ends kube-apiserver, then etcd, and waits for both to exit. It is
// safe to call more than once.
func (cp *ControlPlane) Stop() error {
	var errs []error
	cp.stopOnce.Do(func() {
		for i := len(cp.procs) - 1; i >= 0; i-- {
			if err := cp.procs[i].Stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

// freePorts asks the kernel for n distinct free loopback ports. They are
// released before the servers bind them, which leaves a small window for
// another process to take one; the servers then fail to start and Start
// reports it.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeRSAKey writes a fresh key for signing service account tokens; the
// API server reads the public half from the same file.
func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	block := &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	return os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "local"
	return clientcmd.WriteToFile(*kc, path)
}

// tail returns the last few KB of a log file, to explain a failure.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	const max = 4096
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return "--- last lines of " + path + " ---\n" + string(data)
}
