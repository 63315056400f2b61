package main

import (
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/artifact"
	"github.com/helm-locker/helm-locker/internal/controller"
	"github.com/helm-locker/helm-locker/internal/sandbox"
)

// options are the operator's flags. The first four are rancher/helm-locker's,
// with the same names and defaults.
type options struct {
	config         string
	kubeconfig     string
	namespace      string
	controllerName string
	nodeName       string
	workers        int
	helmManagers   []string
	defaultSA      string
	rerender       string
	// upgradeInterval and upgradesPerHour bound Upgrade mode's
	// upgrades of each release.
	upgradeInterval time.Duration
	upgradesPerHour int
	tenantLocks     bool
	qps             float32
	burst           int
	watchSelector   string
	leaderElect     bool
	leaseName       string
	leaseDuration   time.Duration
	renewDeadline   time.Duration
	retryPeriod     time.Duration
	metricsAddr     string
	profiling       bool
	healthAddr      string
	logFormat       string
	webhookAddr     string
	webhookURL      string
	webhookService  string
	webhookCertDir  string
	exemptGroups    []string
	helmTimeout     time.Duration
	installCRDs     bool
	renderTimeout   time.Duration
	renderMemory    *bytesFlag
	// The caps of a ManifestLock's spec.sourceRef artifact.
	artifactDownload, artifactUnpacked *bytesFlag
	artifactFiles                      int
}

// newRootCommand builds the command tree. Run with no subcommand, it runs
// the operator. Errors are printed once, by main.
func newRootCommand() *cobra.Command {
	opts := &options{renderMemory: newBytesFlag(sandbox.DefaultMemoryLimit),
		artifactDownload: newBytesFlag(artifact.DefaultMaxDownload), artifactUnpacked: newBytesFlag(artifact.DefaultMaxUnpacked)}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root := &cobra.Command{
		Use:   "helm-locker",
		Short: "Keep the objects of Helm releases exactly as their manifests declare",
		Long: `helm-locker locks Helm releases. For every HelmRelease CR in the registration
namespace, while the release's latest revision is deployed, every object in its
manifest is held as the manifest declares: edits are reverted and deleted
objects are recreated. While Helm works on the release, the lock opens.

Every flag can also be set in the environment (HELM_LOCKER_NAMESPACE, ...)
or in the file given with --config (YAML, JSON or TOML, keys named as flags).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Both set flags: from the environment and --config, and
			// --log-format and --v.
			if err := bindConfig(cmd, opts.config); err != nil {
				return usageError(cmd, err)
			}
			if err := setupLogging(opts.logFormat, klogFlags.Lookup("v").Value.String()); err != nil {
				return usageError(cmd, err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return usageError(cmd, err)
			}
			return runOperator(cmd.Context(), opts)
		},
	}
	f := root.Flags()
	root.PersistentFlags().StringVar(&opts.config, "config", "", "read flags from this file (YAML, JSON or TOML)")
	f.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file; defaults to $KUBECONFIG, ~/.kube/config, then the in-cluster service account")
	f.StringVar(&opts.namespace, "namespace", "cattle-helm-system", "registration namespace: the HelmRelease CRs served live here; created if missing")
	f.StringVar(&opts.controllerName, "controller-name", "helm-locker", "name written into the helmreleases.cattle.io/managed-by annotation; CRs naming another controller are left alone")
	f.StringVar(&opts.nodeName, "node-name", "", "name of the node the operator runs on, for logs")
	f.IntVar(&opts.workers, "workers", 64, "releases synced at once")
	f.Float32Var(&opts.qps, "kube-api-qps", -1, "client-side limit on requests per second to the API server; negative leaves it to the server's priority and fairness")
	f.IntVar(&opts.burst, "kube-api-burst", 1000, "burst above --kube-api-qps")
	f.StringVar(&opts.watchSelector, "watch-label-selector", "", "label selector of the HelmRelease and ManifestLock CRs served, such as sharding.helm-locker.io/shard=a, so that shards split the CRs between them; empty serves them all")
	f.BoolVar(&opts.leaderElect, "leader-elect", true, "run only while holding the Lease --leader-elect-lease-name in the registration namespace, so that of several replicas only one writes")
	f.StringVar(&opts.leaseName, "leader-elect-lease-name", "", "name of the Lease, in the registration namespace, that replicas compete for; it also names the webhook configuration <name>.<namespace> and the certificate Secret <name>-webhook. Empty is --controller-name; each shard needs its own")
	f.DurationVar(&opts.leaseDuration, "leader-elect-lease-duration", 12*time.Second, "how long a standby waits, from when it saw the Lease last renewed, before taking it over: with startup, the longest a crashed leader goes unreplaced")
	f.DurationVar(&opts.renewDeadline, "leader-elect-renew-deadline", 11*time.Second, "how long after its last renewal a leader that cannot renew stops leading (and stands by again); shorter than the lease duration, so it stops before a standby takes over")
	f.DurationVar(&opts.retryPeriod, "leader-elect-retry-period", 10*time.Second, "how often an idle leader renews its Lease (the locker's only requests when nothing changes; while it sends others, from half of it on), and how long to wait after a failed request; standbys watch the Lease rather than poll it")
	f.StringVar(&opts.defaultSA, "default-service-account", "", "ServiceAccount, in each release's namespace, whose identity the writes of a HelmRelease without spec.serviceAccountName impersonate; empty writes with the locker's own identity")
	f.StringVar(&opts.rerender, "default-rerender", string(v1alpha1.RerenderOff), "spec.rerender of a HelmRelease that sets none: Off, Report (render the chart again when the cluster moves under the release, as its write identity, and report what would change) or Upgrade (also upgrade the release through Helm)")
	f.DurationVar(&opts.upgradeInterval, "rerender-upgrade-interval", controller.DefaultRerenderUpgradeInterval, "least time between two upgrades of a release by spec.rerender Upgrade, doubled each time the cause changes again within twice the interval, back to this once it stops: a held-back upgrade says Rendered=False, reason UpgradeThrottled, and is made when its time comes. Each upgrade opens the lock while Helm works")
	f.IntVar(&opts.upgradesPerHour, "rerender-upgrade-max-per-hour", controller.DefaultRerenderUpgradeMaxPerHour, "most upgrades of a release by spec.rerender Upgrade within any hour; past them, the next waits (Rendered=False, reason UpgradeThrottled)")
	f.BoolVar(&opts.tenantLocks, "tenant-manifest-locks", true, "also serve ManifestLocks outside the registration namespace (each holding its own namespace's objects, and writing only as a ServiceAccount whose helm-locker.io/manifest-locks annotation names the lock); run one locker per cluster with it, or annotate each lock helm-locker.io/managed-by: <controller-name>")
	f.StringSliceVar(&opts.helmManagers, "helm-field-managers", []string{"helm"}, "field managers Helm writes with (Helm names its manager after its binary)")
	f.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8080", "address serving Prometheus metrics on /metrics; 0 turns them off")
	f.BoolVar(&opts.profiling, "profiling", false, "also serve Go's profiles on the metrics address, under /debug/pprof/ (heap?gc=1 collects garbage first)")
	f.StringVar(&opts.healthAddr, "health-probe-bind-address", ":8081", "address serving /healthz and /readyz; 0 turns them off")
	f.StringVar(&opts.logFormat, "log-format", "text", "log format: text (klog) or json")
	f.StringVar(&opts.webhookAddr, "webhook-bind-address", ":9443", "address serving the admission webhook of Prevent mode, over TLS; 0 turns admission off")
	f.StringVar(&opts.webhookURL, "webhook-url", "", "URL the API server calls the webhook at, for a locker outside the cluster (https://127.0.0.1:9443/validate); empty calls the Service --webhook-service")
	f.StringVar(&opts.webhookService, "webhook-service", "helm-locker-webhook", "Service in the registration namespace the API server calls the webhook through (port 443), unless --webhook-url is set; each shard needs its own, selecting its own pods")
	f.StringVar(&opts.webhookCertDir, "webhook-cert-dir", "", "folder with the webhook's ca.crt, tls.crt and tls.key, such as a cert-manager Secret; empty keeps a self-signed CA and certificate in the Secret <--leader-elect-lease-name>-webhook in the registration namespace")
	f.DurationVar(&opts.helmTimeout, "helm-operation-timeout", controller.DefaultHelmOperationTimeout, "how long a release revision may stay pending or uninstalling before the lock holds the last verified revision again (a Helm killed mid-way never finishes; Helm's own --timeout is 5m)")
	f.BoolVar(&opts.installCRDs, "install-crds", true, "create or update the HelmRelease and ManifestLock CRDs at startup; false when something else installs them (the Helm chart's crds/), so the locker needs no write on CRDs")
	f.DurationVar(&opts.renderTimeout, "render-timeout", sandbox.DefaultTimeout, "how long rendering a chart again (spec.rerender) may take, lookups included: past it, the render's process is killed and the HelmRelease says Rendered=False, reason RenderTimeout, until the revision, the cluster or an object it looked up changes")
	f.Var(opts.artifactDownload, "artifact-max-download", "the largest tar.gz a ManifestLock's spec.sourceRef artifact may be: past it, it is not downloaded further and the lock says Ready=False, reason ArtifactTooLarge, holding its last revision")
	f.Var(opts.artifactUnpacked, "artifact-max-unpacked", "the most bytes a spec.sourceRef artifact may unpack to (ArtifactTooLarge past it)")
	f.IntVar(&opts.artifactFiles, "artifact-max-files", artifact.DefaultMaxFiles, "the most files a spec.sourceRef artifact may hold, and objects its build may make (ArtifactTooLarge past it)")
	f.Var(opts.renderMemory, "render-memory-limit", "memory a render's process may map (its RLIMIT_DATA): past it, the render is stopped and the HelmRelease says Rendered=False, reason RenderTooLarge. Two renders run at once, each in a process beside the locker's: leave room for them in the container's memory limit")
	f.StringSliceVar(&opts.exemptGroups, "prevent-exempt-groups", nil, "groups whose writes to objects Prevent locks hold pass admission (break glass; the revert still applies unless the lock is suspended); Kubernetes' garbage collector and namespace controller always pass")
	f.AddGoFlag(klogFlags.Lookup("v"))
	root.AddCommand(newVersionCommand(), newInspectCommand(), newDiffCommand(), newLockCommand(), newRenderSandboxCommand())
	exitUsageOnBadCalls(root)
	return root
}

// validate checks the flag values that need no cluster to check, so that
// a wrong one is a usage error rather than a failure after startup.
func (o *options) validate() error {
	if _, err := o.served(); err != nil {
		return err
	}
	if !slices.Contains([]v1alpha1.Rerender{v1alpha1.RerenderOff, v1alpha1.RerenderReport, v1alpha1.RerenderUpgrade}, v1alpha1.Rerender(o.rerender)) {
		return fmt.Errorf("--default-rerender %q: want Off, Report or Upgrade", o.rerender)
	}
	if o.webhookURL != "" {
		if _, err := parseWebhookURL(o.webhookURL); err != nil {
			return err
		}
	}
	if o.upgradeInterval <= 0 {
		return fmt.Errorf("--rerender-upgrade-interval %s: want more than 0", o.upgradeInterval)
	}
	if o.upgradesPerHour < 1 {
		return fmt.Errorf("--rerender-upgrade-max-per-hour %d: want at least 1", o.upgradesPerHour)
	}
	if o.renderTimeout <= 0 {
		return fmt.Errorf("--render-timeout %s: want more than 0", o.renderTimeout)
	}
	if o.renderMemory.bytes() < sandbox.MinMemoryLimit {
		return fmt.Errorf("--render-memory-limit %s: want at least %dMi, which a render's process needs to start", o.renderMemory, sandbox.MinMemoryLimit>>20)
	}
	return nil
}

// renderOptions are the options of the operator's renders.
func (o *options) renderOptions() sandbox.Options {
	return sandbox.Options{Timeout: o.renderTimeout, MemoryLimit: o.renderMemory.bytes()}
}
