package v1alpha1

// The reasons of the conditions and of status.notLocked. A reason is part
// of the API: alerts and scripts match it, so its value never changes. The
// controller emits only these constants, those of ConditionAdmissionAnswered
// and, for ManifestLocks, the ManifestLock API's own; a test holds it to
// that.

// The reasons of a lock that holds its objects: of Locked, and of Ready,
// which repeats Locked's reason until the lock has settled.
const (
	// ReasonLocked: every object is checked and held as declared (Locked
	// and Ready True); on an open lock's Locked, the release is deployed
	// and about to be held.
	ReasonLocked = "Locked"
	// ReasonReconciling: objects are still being checked or corrected.
	ReasonReconciling = "Reconciling"
	// ReasonWarnMode: spec.mode is Warn, so drift is reported and never
	// reverted; Locked stays False.
	ReasonWarnMode = "WarnMode"
	// ReasonMonitoring: Ready is True in Warn mode, every object checked.
	ReasonMonitoring = "Monitoring"
	// ReasonNotAppliedByHelm: objects of the revision are held back, as
	// Helm was not seen to apply them (see VerifiedRevision); also an
	// object's reason in status.notLocked.
	ReasonNotAppliedByHelm = "NotAppliedByHelm"
	// ReasonConflict: another lock holds the object (in
	// status.notLocked, or on Locked), or another HelmRelease already
	// locks the release and this one holds nothing; in status.notLocked,
	// also a write the API server refused as a conflict.
	ReasonConflict = "Conflict"
	// ReasonWaitingForTypes: the API server does not serve the kind of
	// some objects yet, typically a custom resource whose CRD the same
	// set declares.
	ReasonWaitingForTypes = "WaitingForTypes"
	// ReasonWaitingForNamespace: objects wait for a namespace that the
	// same lock declares to exist; also an object's reason in
	// status.notLocked.
	ReasonWaitingForNamespace = "WaitingForNamespace"
	// ReasonWatchForbidden: the locker's own RBAC does not let it watch
	// a type it holds.
	ReasonWatchForbidden = "WatchForbidden"
	// ReasonWatchesNotSynced: the watches of a type held are not current
	// (not listed yet, or failing); Locked and Ready are Unknown until
	// they are.
	ReasonWatchesNotSynced = "WatchesNotSynced"
	// ReasonUnchecked: objects differ from the manifest where the API
	// server refuses the lock's writer, and the locker itself, the dry
	// run that tells drift from the form the server stores the manifest
	// in (a default inside an atomic list, such as a webhook rule's
	// scope, or a quantity). The lock cannot tell whether they drifted,
	// and could not correct them: they are not reported as drift and
	// nothing is written to them, and they are dry-run again every
	// minute. Locked and Ready are False; also an object's reason in
	// status.notLocked.
	ReasonUnchecked = "Unchecked"
	// ReasonCorrectionFailed: a correction failed with an error a retry
	// may cure; it is retried with backoff.
	ReasonCorrectionFailed = "CorrectionFailed"
	// ReasonFighting: another field manager keeps rewriting a locked
	// field, and the locker backs off (Fighting True, Ready False).
	ReasonFighting = "Fighting"
	// ReasonHelmOperationStuck: on Ready, a revision stayed pending past
	// the Helm operation timeout, and the last verified revision is
	// held again.
	ReasonHelmOperationStuck = "HelmOperationStuck"
)

// The reasons of an open lock, which holds nothing: of Locked and Ready,
// and LockOpen on Drifted and Fighting.
const (
	// ReasonLockOpen: Drifted and Fighting are not looked for while the
	// lock is open.
	ReasonLockOpen = "LockOpen"
	// ReasonSuspended: spec.suspend is true.
	ReasonSuspended = "Suspended"
	// ReasonInvalidSpec: the spec cannot be held as it stands, such as
	// a release with no name or an ignore rule that does not parse.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonInvalidRelease: the release Secret cannot be read as a Helm
	// release.
	ReasonInvalidRelease = "InvalidRelease"
	// ReasonImpersonationUnavailable: the identity the lock writes as
	// (spec.serviceAccountName) cannot be used.
	ReasonImpersonationUnavailable = "ImpersonationUnavailable"
	// ReasonUnsupportedStorageDriver: Helm keeps the release in
	// ConfigMaps; only its default Secret driver is supported.
	ReasonUnsupportedStorageDriver = "UnsupportedStorageDriver"
	// ReasonSecretNotFound: no release Secret holds the release.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonHelmOperationInProgress: Helm is installing, upgrading,
	// rolling back or uninstalling the release, and the lock stays open
	// until it is done; in status.notLocked, a write refused because the
	// lock opened meanwhile.
	ReasonHelmOperationInProgress = "HelmOperationInProgress"
	// ReasonReleaseFailed: the latest revision failed; its manifest is
	// not held.
	ReasonReleaseFailed = "ReleaseFailed"
	// ReasonReleaseUninstalled: the release was uninstalled, its
	// history kept.
	ReasonReleaseUninstalled = "ReleaseUninstalled"
	// ReasonReleaseSuperseded: the latest revision is marked
	// superseded, which Helm does not leave behind normally.
	ReasonReleaseSuperseded = "ReleaseSuperseded"
	// ReasonUnknownReleaseStatus: the latest revision has a status Helm
	// does not define.
	ReasonUnknownReleaseStatus = "UnknownReleaseStatus"
)

// The reasons of Drifted and Fighting (besides ReasonFighting).
const (
	// ReasonInLine: every checked object is as declared (Drifted False).
	ReasonInLine = "InLine"
	// ReasonDrift: objects differ from the manifest (Drifted True).
	ReasonDrift = "Drift"
	// ReasonNoFight: no field manager is fighting the lock (Fighting
	// False).
	ReasonNoFight = "NoFight"
)

// The reasons of one object in status.notLocked, besides
// ReasonNotAppliedByHelm, ReasonConflict, ReasonWaitingForNamespace and
// ReasonHelmOperationInProgress. The API server's refusals of a
// correction (ReasonTooLarge to ReasonMethodNotAllowed) are also the
// reason of Locked while they last.
const (
	// ReasonOptedOut: the manifest sets UnlockAnnotation to "false" on
	// the object.
	ReasonOptedOut = "OptedOut"
	// ReasonGenerateName: the object is named by
	// metadata.generateName, so there is no one object to hold.
	ReasonGenerateName = "GenerateName"
	// ReasonFinished: a Job finished and its ttlSecondsAfterFinished
	// deleted it; it is not recreated, which would run it again.
	ReasonFinished = "Finished"
	// ReasonTypeNotServed: the API server does not serve the object's
	// kind.
	ReasonTypeNotServed = "TypeNotServed"
	// ReasonAPIError: the API server failed a read or a write of the
	// object; it is retried.
	ReasonAPIError = "APIError"
	// ReasonTooLarge: the object is larger than the API server accepts.
	ReasonTooLarge = "TooLarge"
	// ReasonInvalid: the API server's validation rejects the object; or
	// an object of the manifest cannot be read at all.
	ReasonInvalid = "Invalid"
	// ReasonImmutable: the correction changes a field that cannot
	// change once set.
	ReasonImmutable = "Immutable"
	// ReasonForbidden: the identity the lock writes as may not write
	// the object.
	ReasonForbidden = "Forbidden"
	// ReasonNamespaceNotFound: the object's namespace does not exist.
	ReasonNamespaceNotFound = "NamespaceNotFound"
	// ReasonBadRequest: the API server cannot read the request.
	ReasonBadRequest = "BadRequest"
	// ReasonMethodNotAllowed: the resource does not take the write.
	ReasonMethodNotAllowed = "MethodNotAllowed"
)

// The reasons of Rendered.
const (
	// ReasonRendersAsStored: the chart renders now what the locked
	// revision stores (Rendered True).
	ReasonRendersAsStored = "RendersAsStored"
	// ReasonClusterChanged: the chart would render differently now; the
	// message names the cause (Rendered False).
	ReasonClusterChanged = "ClusterChanged"
	// ReasonRenderForbidden: the write identity may not make a lookup
	// the chart makes; the message names it, and nothing is read.
	ReasonRenderForbidden = "Forbidden"
	// ReasonNoWriteIdentity: the lock writes as the locker itself, whose
	// reads would let a chart look up any object; nothing is rendered.
	ReasonNoWriteIdentity = "NoWriteIdentity"
	// ReasonRenderFailed: the chart fails to render, or its revision
	// cannot be read whole.
	ReasonRenderFailed = "RenderFailed"
	// ReasonNotRendered: the lock does not hold a verified revision yet,
	// so there is nothing to render.
	ReasonNotRendered = "NotRendered"
	// ReasonUpgraded: in Upgrade mode, the locker upgraded the release
	// with the new render.
	ReasonUpgraded = "Upgraded"
	// ReasonUpgradeFailed: in Upgrade mode, Helm's upgrade failed; the
	// message gives Helm's error. It is not retried for the same cause,
	// and the last deployed revision stays held.
	ReasonUpgradeFailed = "UpgradeFailed"
	// ReasonUpgradeThrottled: in Upgrade mode, the chart would render
	// differently now, and the upgrade is held back: the release was
	// upgraded less than --rerender-upgrade-interval ago (an interval
	// that doubles while the cause keeps changing), or
	// --rerender-upgrade-max-per-hour times within the hour. The message
	// names what would change and when the upgrade is tried next; it is
	// then tried without another change.
	ReasonUpgradeThrottled = "UpgradeThrottled"
	// ReasonUnverifiedChart: the chart or the user values in the
	// Secret of the revision whose chart the lock trusts are not the
	// ones recorded when it was verified (status.verified): a Secret
	// writer rewrote them. Nothing is rendered.
	ReasonUnverifiedChart = "UnverifiedChart"
	// ReasonRenderTimeout: the chart's render ran past its deadline
	// (--render-timeout) and was stopped. It is tried again at the
	// next trigger.
	ReasonRenderTimeout = "RenderTimeout"
	// ReasonRenderTooLarge: the chart's render took more memory than
	// its cap (--render-memory-limit) and was stopped. It is tried
	// again at the next trigger.
	ReasonRenderTooLarge = "RenderTooLarge"
)

// The reasons of Rendered that spec.chartRef adds. Nothing is rendered
// with them; each message names the source, its revision and the
// problem. The chart is read again when its source changes.
const (
	// ReasonChartMismatch: the chart spec.chartRef's artifact holds is
	// not the one the verified revision stored: the message names the
	// first of its own files (Chart.yaml, values.yaml, a template...)
	// that differs.
	ReasonChartMismatch = "ChartMismatch"
	// ReasonChartSourceNotServed: the cluster does not serve
	// spec.chartRef's kind (Flux's CRDs are not installed); the chart is
	// read once it does.
	ReasonChartSourceNotServed = "SourceNotServed"
	// ReasonChartSourceNotReady: the source does not exist, has no
	// artifact yet, or its artifact could not be downloaded.
	ReasonChartSourceNotReady = "SourceNotReady"
	// ReasonChartDigestMismatch: the artifact downloaded is not the one
	// its source's status names.
	ReasonChartDigestMismatch = "ArtifactDigestMismatch"
	// ReasonChartTooLarge: the artifact, packed or unpacked, is past the
	// locker's caps (--artifact-max-download, --artifact-max-unpacked,
	// --artifact-max-files).
	ReasonChartTooLarge = "ArtifactTooLarge"
	// ReasonChartUnsafe: the artifact holds a symlink, a link, or a path
	// that leaves its folder, and is refused whole.
	ReasonChartUnsafe = "UnsafeArtifact"
	// ReasonInvalidChart: the artifact holds no chart Helm's loader
	// loads.
	ReasonInvalidChart = "InvalidChart"
)
