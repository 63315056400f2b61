package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api"
	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/informers"
	"github.com/helm-locker/helm-locker/internal/admission"
	"github.com/helm-locker/helm-locker/internal/artifact"
	"github.com/helm-locker/helm-locker/internal/controller"
	"github.com/helm-locker/helm-locker/internal/events"
	"github.com/helm-locker/helm-locker/internal/leader"
	"github.com/helm-locker/helm-locker/internal/metrics"
	"github.com/helm-locker/helm-locker/internal/sandbox"
	"github.com/helm-locker/helm-locker/internal/webhook"
)

// runOperator installs the CRD, then runs the controller until ctx is done.
func runOperator(ctx context.Context, opts *options) error {
	ctx = withOperatorLogger(ctx, opts)
	selector, err := opts.served()
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting helm-locker", "version", versionString(), "namespace", opts.namespace, "lease", opts.lease(), "selector", selector.String(), "heapLimitBytes", limitHeap())

	op := &operator{opts: opts, selector: selector}
	op.metrics = newMetrics(opts, op.informers)
	op.metrics.ReportWatching(op.watching)
	if err := op.buildClients(); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, op.kube, opts.namespace); err != nil {
		return err
	}
	if err := crds(ctx, op.ext, opts.installCRDs); err != nil {
		return err
	}
	op.recorder = newRecorder(op.kube, opts, op.metrics)
	if err := op.buildWebhook(); err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { op.recorder.Run(ctx) })
	wg.Go(func() { trimResident(ctx) })
	if err := op.serve(ctx, &wg); err != nil {
		return err
	}
	if !opts.leaderElect {
		return op.runTerm(ctx, nil)
	}
	busy := func() bool { return op.activity.within(opts.retryPeriod) }
	return runAsLeader(ctx, op.leases, opts, op.readiness, busy, op.runTerm, op.standBy)
}

// operator is what runOperator builds: the clients and the parts that
// every controller of this process shares, and the controllers it runs.
type operator struct {
	opts     *options
	selector labels.Selector
	// metrics is nil with --metrics-bind-address 0.
	metrics *metrics.Metrics

	cfg       *rest.Config
	kube      *kubernetes.Clientset
	dyn       *dynamic.DynamicClient
	meta      metadata.Interface
	ext       *apiextensionsclient.Clientset
	mapper    *restmapper.DeferredDiscoveryRESTMapper
	readiness *informers.Probe
	recorder  *events.Recorder

	// leases is the elector's client, and activity what every other
	// client sent (see leader.Config.Busy).
	leases   kubernetes.Interface
	activity activity

	// certs and probe are nil with admission off.
	certs webhook.CertSource
	probe *webhook.Probe

	// current is the controller of this term of leadership (see
	// runAsLeader); nil while standing by.
	current atomic.Pointer[controller.Controller]
	// standby is the read-only controller of a replica standing by: it
	// answers admission from the same declarations as the leader, and
	// writes nothing (see controller.Config.ReadOnly).
	standby atomic.Pointer[controller.Controller]
}

// withOperatorLogger names the controller, and the node if known, in
// every log line of the operator.
func withOperatorLogger(ctx context.Context, opts *options) context.Context {
	logger := klog.FromContext(ctx).WithValues("controller", opts.controllerName)
	if opts.nodeName != "" {
		logger = logger.WithValues("node", opts.nodeName)
	}
	return klog.NewContext(ctx, logger)
}

// newMetrics returns the operator's metrics, or nil with metrics off;
// watched lists the types the current controller watches.
func newMetrics(opts *options, watched func() []schema.GroupVersionResource) *metrics.Metrics {
	if opts.metricsAddr == "" || opts.metricsAddr == "0" {
		return nil
	}
	m := metrics.New(watched)
	// Before the first request, so that every request is counted.
	m.ReportClientRequests()
	// Helm's managers are the admin's to name; drift_detected_total
	// names them too.
	m.KnowManagers(opts.helmManagers...)
	return m
}

// informers lists the types the current controller watches; none while
// standing by.
func (op *operator) informers() []schema.GroupVersionResource {
	if c := op.current.Load(); c != nil {
		return c.Informers()
	}
	return nil
}

// watching reports whether the current controller's watches are current;
// true while standing by, which holds nothing.
func (op *operator) watching() bool {
	if c := op.current.Load(); c != nil {
		ok, _ := c.Watching()
		return ok
	}
	return true
}

// buildClients builds the API clients, all from one rest.Config, and the
// RESTMapper and readiness probe that every controller shares. The Lease's
// client is the one left out of the count of activity.
func (op *operator) buildClients() error {
	cfg, err := restConfig(op.opts.kubeconfig, op.opts.qps, op.opts.burst)
	if err != nil {
		return err
	}
	if op.leases, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	cfg.Wrap(op.activity.wrap)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	op.cfg, op.kube, op.dyn, op.meta, op.ext = cfg, kube, dyn, meta, ext
	op.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	// One probe for every informer and the elector: through an outage,
	// they all wait on the same /readyz answers.
	op.readiness = informers.NewProbe(kube.Discovery().RESTClient())
	return nil
}

// eventCacheSize is how many recent events each of the event correlator's
// caches remembers.
const eventCacheSize = 256

// newRecorder returns the recorder of events on CRs, which every
// controller of this process shares.
//
// The correlator remembers recent events, to fold repeats, in three
// caches of 4096 entries by default: a few KB per release that emitted
// one, for a dedup that matters only within minutes. The locker already
// holds its own drift events back (see the controller's
// bookkeepingDelay), so a smaller memory is enough.
func newRecorder(kube kubernetes.Interface, opts *options, m *metrics.Metrics) *events.Recorder {
	return events.NewRecorder(kube.CoreV1(), scheme.Scheme, corev1.EventSource{Component: opts.controllerName, Host: opts.nodeName},
		events.Options{Correlator: record.CorrelatorOptions{LRUCacheSize: eventCacheSize}, Dropped: m.EventDropped})
}

// buildWebhook builds where the webhook's certificate comes from and the
// leader's probe of the webhook; with admission off, both stay nil.
func (op *operator) buildWebhook() error {
	certs, err := webhookCerts(op.kube, op.opts)
	if err != nil {
		return err
	}
	probe, err := webhookProbe(op.cfg, op.opts, certs, op.metrics)
	if err != nil {
		return err
	}
	op.certs, op.probe = certs, probe
	return nil
}

// newController builds a controller from the operator's shared parts: a
// leader's, or with readOnly a standby's.
func (op *operator) newController(readOnly bool) *controller.Controller {
	// A nil *webhook.Probe in the interface would not be nil.
	var admissionProbe controller.AdmissionProbe
	if op.probe != nil {
		admissionProbe = op.probe
	}
	return controller.New(controller.Config{
		ReadOnly:                  readOnly,
		Namespace:                 op.opts.namespace,
		ControllerName:            op.opts.controllerName,
		Selector:                  op.selector,
		HelmManagers:              op.opts.helmManagers,
		DefaultServiceAccount:     op.opts.defaultSA,
		DefaultRerender:           v1alpha1.Rerender(op.opts.rerender),
		RerenderUpgradeInterval:   op.opts.upgradeInterval,
		RerenderUpgradeMaxPerHour: op.opts.upgradesPerHour,
		TenantManifestLocks:       op.opts.tenantLocks,
		Dynamic:                   op.dyn,
		REST:                      op.cfg,
		Metadata:                  op.meta,
		Kube:                      op.kube,
		Mapper:                    op.mapper,
		Workers:                   op.opts.workers,
		HelmOperationTimeout:      op.opts.helmTimeout,
		Recorder:                  op.recorder,
		Metrics:                   op.metrics,
		Readiness:                 op.readiness,
		Admission:                 admissionProbe,
		Renderer:                  sandbox.New(op.opts.renderOptions()),
		ArtifactLimits: artifact.Limits{MaxDownload: op.opts.artifactDownload.bytes(), MaxUnpacked: op.opts.artifactUnpacked.bytes(),
			MaxFiles: op.opts.artifactFiles},
	})
}

// Renders run in a sandbox process (see newRenderSandboxCommand).
var _ controller.Renderer = (*sandbox.Renderer)(nil)

// serve starts, until ctx is done, the servers every replica runs,
// leader or not: metrics, health probes and, with admission on, the
// webhook.
func (op *operator) serve(ctx context.Context, wg *sync.WaitGroup) error {
	if op.metrics != nil {
		if err := serveHTTP(ctx, wg, "metrics", op.opts.metricsAddr, metricsMux(op.metrics, op.opts.profiling)); err != nil {
			return err
		}
	}
	if err := serveHTTP(ctx, wg, "health probes", op.opts.healthAddr, healthHandler(op.ready)); err != nil {
		return err
	}
	if op.certs == nil {
		return nil
	}
	server := &webhook.Server{Addr: op.opts.webhookAddr, Certs: op.certs, Refresh: webhook.Reread,
		Handler: admission.NewHandler(op.locks, admission.Options{ExemptGroups: op.opts.exemptGroups, Observer: op.metrics})}
	return server.Start(ctx, wg)
}

// ready is /readyz's answer. A standby replica has nothing to sync and is
// ready to take over; the leader is ready once its caches have synced,
// and while they see changes as they happen.
func (op *operator) ready() (bool, string) {
	c := op.current.Load()
	switch {
	case c == nil && op.opts.leaderElect:
		return true, "standing by for the leader Lease"
	case c == nil || !c.Synced():
		return false, "caches have not synced yet"
	}
	if ok, why := c.Watching(); !ok {
		return false, why
	}
	return true, "caches synced and watching"
}

// locks is what the webhook answers from. The leader's controller answers
// once its caches have synced, a standby's until then; with neither,
// every request is let through.
func (op *operator) locks() admission.Locks {
	if c := op.current.Load(); c != nil && c.Synced() {
		return c
	}
	if c := op.standby.Load(); c != nil && c.Synced() {
		return c
	}
	return nil
}

// standing is the read-only controller of a replica standing by (see
// standBy), until a term of leadership takes it.
type standing struct {
	op     *operator
	c      *controller.Controller
	cancel context.CancelFunc
	done   chan struct{}
	// taken is set once a term took the controller: stop leaves it then.
	taken atomic.Bool
}

// standBy runs a read-only controller while this replica stands by: it
// answers admission from the same declarations as the leader, keeps its
// caches warm, and writes nothing, until a term takes it (see take) or
// stop stops it.
func (op *operator) standBy(ctx context.Context) *standing {
	ctx, cancel := context.WithCancel(ctx)
	sb := &standing{op: op, c: op.newController(true), cancel: cancel, done: make(chan struct{})}
	op.standby.Store(sb.c)
	go func() {
		defer close(sb.done)
		defer op.standby.CompareAndSwap(sb.c, nil)
		_ = sb.c.Run(ctx)
	}()
	return sb
}

// stop stops the standby's controller and waits for it, unless a term
// took it.
func (sb *standing) stop() {
	if sb == nil || sb.taken.Load() {
		return
	}
	sb.cancel()
	<-sb.done
}

// take hands the standby's controller to a term of leadership, which
// promotes it; end stops it, and waits for it, when the term ends. It is
// nil without a standby.
func (sb *standing) take() (c *controller.Controller, done <-chan struct{}, end func()) {
	if sb == nil || !sb.taken.CompareAndSwap(false, true) {
		return nil, nil, nil
	}
	sb.op.standby.CompareAndSwap(sb.c, nil)
	return sb.c, sb.done, func() { sb.cancel(); <-sb.done }
}

// runTerm runs a term of leadership with the controller sb kept warm while
// this replica stood by, promoted, or a new one without a standby (no
// leader election). It returns when ctx is done, or when the controller
// stops on its own.
func (op *operator) runTerm(ctx context.Context, sb *standing) error {
	c, done, end := sb.take()
	if c == nil {
		c = op.newController(false)
		ctx, cancel := context.WithCancel(ctx)
		ch := make(chan struct{})
		errc := make(chan error, 1)
		go func() { defer close(ch); errc <- c.Run(ctx) }()
		done, end = ch, func() { cancel(); <-ch }
		defer func() {
			if err := <-errc; err != nil {
				klog.FromContext(ctx).Error(err, "The controller stopped")
			}
		}()
	}
	defer end()
	op.current.Store(c)
	defer op.current.Store(nil)
	c.Promote()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var term sync.WaitGroup
	defer term.Wait()
	if op.certs != nil {
		// The leader keeps the webhook configuration; every replica
		// answers it (see serve).
		term.Go(func() { _ = webhookConfiguration(op.kube, op.opts, op.certs, c).Run(ctx) })
		term.Go(func() { op.probe.Run(ctx) })
	}
	select {
	case <-ctx.Done():
		return nil
	case <-done:
		return errors.New("the controller stopped on its own")
	}
}

// webhookCerts returns where the webhook's certificate comes from, or nil
// with admission off.
func webhookCerts(kube kubernetes.Interface, opts *options) (webhook.CertSource, error) {
	if opts.webhookAddr == "" || opts.webhookAddr == "0" {
		return nil, nil
	}
	if opts.webhookCertDir != "" {
		return &webhook.DirCerts{Dir: opts.webhookCertDir}, nil
	}
	hosts := []string{opts.webhookService + "." + opts.namespace + ".svc", opts.webhookService + "." + opts.namespace + ".svc.cluster.local"}
	if opts.webhookURL != "" {
		u, err := parseWebhookURL(opts.webhookURL)
		if err != nil {
			return nil, err
		}
		hosts = append([]string{u.Hostname()}, hosts...)
	}
	return &webhook.SecretCerts{Kube: kube, Namespace: opts.namespace, Name: opts.lease() + "-webhook", Hosts: hosts}, nil
}

// parseWebhookURL parses --webhook-url.
func parseWebhookURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("--webhook-url %q: want an https URL, such as https://127.0.0.1:9443%s", raw, webhook.Path)
	}
	return u, nil
}

// webhookConfiguration keeps the ValidatingWebhookConfiguration named
// after the Lease and the registration namespace: the controller name by
// default, and one of its own for each shard. The API server calls every
// configuration that matches a request, and each shard denies what its
// own locks hold, so no shard may overwrite another's rules, nor have its
// calls answered by another's pods (see --webhook-service).
func webhookConfiguration(kube kubernetes.Interface, opts *options, certs webhook.CertSource, locks webhook.Prevented) *webhook.Configuration {
	return &webhook.Configuration{
		Kube: kube, Name: opts.lease() + "." + opts.namespace, URL: opts.webhookURL,
		Service: &admissionregistrationv1.ServiceReference{Namespace: opts.namespace, Name: opts.webhookService, Path: ptr.To(webhook.Path), Port: ptr.To[int32](443)},
		Locks:   locks, Certs: certs, Every: time.Second, ProbeNamespace: opts.namespace,
	}
}

// webhookProbe returns the leader's probe of the webhook (see
// webhook.Probe), or nil with admission off. It sends the dry-run create
// of the Lease <lease>-admission-probe, which the chart's Role lets it
// create; its client does not log the warning each answer carries.
func webhookProbe(cfg *rest.Config, opts *options, certs webhook.CertSource, m *metrics.Metrics) (*webhook.Probe, error) {
	if certs == nil {
		return nil, nil
	}
	quiet := rest.CopyConfig(cfg)
	quiet.WarningHandler = rest.NoWarnings{}
	kube, err := kubernetes.NewForConfig(quiet)
	if err != nil {
		return nil, err
	}
	return &webhook.Probe{Kube: kube, Namespace: opts.namespace, Name: opts.lease() + "-admission-probe", Observer: m}, nil
}

// metricsMux serves /metrics and, with profiling, Go's profiles. They are
// off by default: a heap profile shows what the process holds, and a
// metrics port is often open to a whole cluster's Prometheus.
func metricsMux(m *metrics.Metrics, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// runAsLeader runs run for each term this process holds the Lease, until
// ctx is done (the Lease is released, so a successor takes over at once).
// A term lost, as when an API server outage outlasts the renew deadline,
// stops run, and with it every write; the process then stands by again,
// and its next term runs run afresh, with new caches. It does not exit:
// restarted by the kubelet while the API server is still down, it would
// back off for minutes (CrashLoopBackOff) after the API server returned.
// While it stands by, standBy runs a read-only controller with warm
// caches; its term takes that controller and promotes it, so that a new
// leader corrects a drift as soon as it holds the Lease. busy says whether
// the work is sending requests: the leader then renews early.
func runAsLeader(ctx context.Context, kube kubernetes.Interface, opts *options, ready leader.Readiness, busy func() bool, run func(ctx context.Context, sb *standing) error, standBy func(context.Context) *standing) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	identity := host + "_" + string(uuid.NewUUID())
	elector, err := leader.New(leader.Config{
		Leases:        kube.CoordinationV1(),
		Namespace:     opts.namespace,
		Name:          opts.lease(),
		Identity:      identity,
		LeaseDuration: opts.leaseDuration,
		RenewDeadline: opts.renewDeadline,
		RetryPeriod:   opts.retryPeriod,
		Readiness:     ready,
		Busy:          busy,
	})
	if err != nil {
		return fmt.Errorf("%w (see --leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period)", err)
	}
	logger := klog.FromContext(ctx)
	for {
		logger.Info("Waiting to lead", "lease", opts.namespace+"/"+opts.lease(), "identity", identity)
		sb := standBy(ctx)
		err := elector.Run(ctx, func(ctx context.Context) error { return run(ctx, sb) })
		sb.stop()
		if !errors.Is(err, leader.ErrLost) || ctx.Err() != nil {
			return err
		}
		logger.Error(err, "Stopped leading; standing by to lead again with fresh caches")
	}
}

// restConfig loads the kubeconfig the way kubectl does, falling back to the
// in-cluster service account. By default there is no client-side rate
// limit: a locker must react to drift, and lock thousands of objects at
// start, as fast as the API server's priority and fairness lets it.
func restConfig(kubeconfig string, qps float32, burst int) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "helm-locker/" + version
	return cfg, nil
}

// crds installs the CRDs, or with install false checks that they are
// there: a chart's crds/ are not upgraded by `helm upgrade`, so a stale
// schema is worth a warning.
func crds(ctx context.Context, ext apiextensionsclient.Interface, install bool) error {
	if install {
		return api.InstallCRDs(ctx, ext)
	}
	stale, err := api.CheckCRDs(ctx, ext)
	for _, name := range stale {
		klog.FromContext(ctx).Info("Warning: this CRD's schema is not this version's, so fields it lacks are dropped; apply deploy/chart/helm-locker/crds", "crd", name)
	}
	return err
}

func ensureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s: %w", name, err)
	}
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}
