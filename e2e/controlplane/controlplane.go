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
	mrand "math/rand/v2"
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

// ControlPlane is a running etcd, kube-apiserver and
// kube-controller-manager. Stop it with Stop; if the process that started it
// dies first, the kernel kills all three (see processAttrs), so a crashed or
// interrupted test run leaves nothing behind.
type ControlPlane struct {
	// Dir holds the data, certificates, logs and the kubeconfig.
	Dir string
	// Kubeconfig is the path of a kubeconfig for a cluster admin.
	Kubeconfig string
	// Config is the same credentials as a rest.Config.
	Config *rest.Config

	// mu serialises Stop, StopAPIServer and StartAPIServer, so that Stop
	// never misses an API server that is being started or stopped.
	mu      sync.Mutex
	stopped bool
	etcd    *Process
	// controllerManager is nil under Options.NoControllerManager.
	controllerManager *Process
	// apiserver is nil while StopAPIServer has it stopped.
	apiserver *Process
	// apiserverPath and apiserverArgs start it again, identically, so that
	// its port, certificates and token, and with them every kubeconfig,
	// stay valid.
	apiserverPath string
	apiserverArgs []string
	// apiserverStarts numbers the log of each restart.
	apiserverStarts int
}

// Options changes how Start configures the control plane, for test binaries
// that need a kube-apiserver unlike the one the rest of the suite shares.
type Options struct {
	// APIServerArgs are extra kube-apiserver flags. They come after Start's
	// own, so a flag given again overrides Start's value, except that list
	// flags such as --disable-admission-plugins add to it.
	APIServerArgs []string
	// NoControllerManager starts no kube-controller-manager: nothing then
	// deletes a namespace's contents, collects garbage, aggregates
	// ClusterRoles or makes default ServiceAccounts.
	NoControllerManager bool
}

// Start runs etcd, kube-apiserver and kube-controller-manager from tools,
// keeping all their state under dir, and returns once /readyz answers and
// the controllers work. On error it stops whatever it had started.
func Start(ctx context.Context, tools Tools, dir string) (*ControlPlane, error) {
	return StartWithOptions(ctx, tools, dir, Options{})
}

// StartWithOptions is Start with a kube-apiserver configured by opts.
func StartWithOptions(ctx context.Context, tools Tools, dir string, opts Options) (_ *ControlPlane, err error) {
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
	etcdURL, err := cp.startEtcd(tools.Etcd, dir, ports[0], ports[1])
	if err != nil {
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
	cp.apiserverPath = tools.KubeAPIServer
	cp.apiserverArgs = append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keyFile,
		"--service-account-signing-key-file=" + keyFile,
		"--service-cluster-ip-range=10.0.0.0/16",
	}, opts.APIServerArgs...)
	if opts.NoControllerManager {
		// The ServiceAccount admission plugin refuses pods whose
		// ServiceAccount does not exist, and without a controller-manager
		// no namespace gets its default one.
		cp.apiserverArgs = append(cp.apiserverArgs, "--disable-admission-plugins=ServiceAccount")
	}
	if err := cp.startAPIServer(); err != nil {
		return nil, err
	}

	cp.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + port,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1, // tests measure the locker, not client-side throttling
	}
	if err := WriteKubeconfig(cp.Kubeconfig, cp.Config); err != nil {
		return nil, err
	}
	if _, err := cp.waitReady(ctx, 2*time.Minute, 250*time.Millisecond); err != nil {
		return nil, err
	}
	if opts.NoControllerManager {
		return cp, nil
	}
	if err := cp.startControllerManager(tools.KubeControllerManager, keyFile); err != nil {
		return nil, err
	}
	if err := cp.waitControllers(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	return cp, nil
}

// startEtcd starts etcd, its data under dir, serving clients on
// clientPort and peers on peerPort, and returns its client URL.
func (cp *ControlPlane) startEtcd(binary, dir string, clientPort, peerPort int) (string, error) {
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	var err error
	if cp.etcd, err = StartProcess("etcd", binary, []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// Test data is thrown away with the directory; fsync only slows
		// every write down on a shared disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, filepath.Join(dir, "etcd.log")); err != nil {
		return "", err
	}
	return etcdURL, nil
}

// StopAPIServer stops kube-apiserver and leaves etcd and
// kube-controller-manager running, for tests of how clients live through an
// API server outage. With kill it sends SIGKILL:
// a crash, after which the kernel closes every connection at once. Without,
// it sends SIGTERM and waits for a graceful shutdown, which can take a
// minute while watches are open. Either way it returns once the process has
// exited.
func (cp *ControlPlane) StopAPIServer(kill bool) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil {
		return errors.New("kube-apiserver is not running")
	}
	p := cp.apiserver
	cp.apiserver = nil
	if kill {
		p.Kill()
		return nil
	}
	return p.Stop(2 * time.Minute)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the
// same flags, port, certificates and token, so that every kubeconfig still
// works. Each restart logs to a file of its own, kube-apiserver-2.log and
// on. It returns when the first /readyz answered ok: polled every 50 ms, so
// that tests can measure how long clients take to recover from that moment.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) (readyAt time.Time, err error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return time.Time{}, errors.New("the control plane is stopped")
	}
	if cp.apiserver != nil {
		return time.Time{}, errors.New("kube-apiserver is already running")
	}
	if err := cp.startAPIServer(); err != nil {
		return time.Time{}, err
	}
	return cp.waitReady(ctx, 2*time.Minute, 50*time.Millisecond)
}

// startAPIServer launches kube-apiserver, logging to kube-apiserver.log the
// first time and kube-apiserver-<n>.log on the nth.
func (cp *ControlPlane) startAPIServer() error {
	cp.apiserverStarts++
	name := "kube-apiserver"
	if cp.apiserverStarts > 1 {
		name += "-" + strconv.Itoa(cp.apiserverStarts)
	}
	p, err := StartProcess("kube-apiserver", cp.apiserverPath, cp.apiserverArgs, filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return err
	}
	cp.apiserver = p
	return nil
}

// processAttrs makes the kernel SIGKILL a child when the thread that started
// it exits. Go's runtime does not retire threads that have not been locked,
// so in practice this fires when the test binary or the local-cluster
// command dies, however it dies, including on SIGKILL or a test timeout.
func processAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// waitReady polls /readyz every interval until it answers ok, a process
// exits, or the timeout passes. It returns when the ok arrived.
func (cp *ControlPlane) waitReady(ctx context.Context, timeout, interval time.Duration) (time.Time, error) {
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr error
	for {
		for _, p := range []*Process{cp.etcd, cp.apiserver} {
			select {
			case <-p.done:
				return time.Time{}, fmt.Errorf("%s exited before the API server was ready: %v\n%s", p.Name, p.err, tail(p.Log))
			default:
			}
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return time.Now(), nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("kube-apiserver not ready after %s: %v\n%s", timeout, lastErr, tail(cp.apiserver.Log))
		case <-tick.C:
		}
	}
}

// PIDs returns the process IDs of etcd, kube-apiserver and
// kube-controller-manager, for tests that prove they do not outlive their
// parent. While StopAPIServer has kube-apiserver stopped, it leaves its out.
func (cp *ControlPlane) PIDs() []int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var pids []int
	for _, p := range []*Process{cp.etcd, cp.apiserver, cp.controllerManager} {
		if p != nil {
			pids = append(pids, p.PID())
		}
	}
	return pids
}

// Stop ends kube-controller-manager, then kube-apiserver, then etcd, and
// waits for each to exit. It is safe to call more than once, and after
// StopAPIServer.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return nil
	}
	cp.stopped = true
	var errs []error
	for _, p := range []*Process{cp.controllerManager, cp.apiserver, cp.etcd} {
		if p == nil {
			continue
		}
		if err := p.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	cp.controllerManager, cp.apiserver, cp.etcd = nil, nil, nil
	return errors.Join(errs...)
}

// freePorts returns n distinct free loopback ports (see FreeAddress).
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		addr, err := FreeAddress()
		if err != nil {
			return nil, err
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// FreeAddress returns a loopback address whose port is free now, for a
// server started later: the port is closed again, and bound by the
// server. One the kernel picked would be from its ephemeral range, which
// every outgoing connection draws from too, and on a busy machine one
// took it in between ("address already in use"). So the port is below
// that range (32768 and up on Linux), and never handed out twice by this
// process.
func FreeAddress() (*net.TCPAddr, error) {
	given.Lock()
	defer given.Unlock()
	for range 1000 {
		port := 20000 + mrand.IntN(12000)
		if given.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().(*net.TCPAddr)
		if err := ln.Close(); err != nil {
			return nil, err
		}
		given.ports[port] = true
		return addr, nil
	}
	return nil, errors.New("found no free loopback port from 20000 to 32000 in 1000 tries")
}

// given are the ports FreeAddress has handed out.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

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

// WriteKubeconfig writes a kubeconfig for cfg's host and bearer token that
// trusts any server certificate, as the control plane's self-signed one
// needs: the shape of Kubeconfig, for clients that reach the API server by
// another address, such as a test proxy.
func WriteKubeconfig(path string, cfg *rest.Config) error {
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
