package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	mlv1 "github.com/helm-locker/helm-locker/api/manifestlock/v1alpha1"
	"github.com/helm-locker/helm-locker/internal/artifact"
	"github.com/helm-locker/helm-locker/internal/overlay"
)

// A ManifestLock's spec.sourceRef: a Flux source whose artifact the
// locker downloads and builds itself, as kustomize-controller does. The
// source is watched by name, so that a new artifact revision is a new
// declaration; a kind the cluster does not serve is looked up again when
// a CRD appears (see sourceWatches.typesChanged).

// artifactTimeout bounds one download.
const artifactTimeout = 2 * time.Minute

// artifactBuilds is how many artifacts are downloaded and built at once:
// each may hold up to the caps in memory (ArtifactLimits), and the
// workers are many, so the locker's memory is bounded by this many
// artifacts, not by the number of locks whose source moved at once.
const artifactBuilds = 2

// sourceError is a sourceRef that cannot be held now, with the reason to
// report; what the lock held before stays held.
type sourceError struct {
	reason, message string
	// retry says the cause may pass by itself (a download that failed):
	// the sync is retried with backoff, as no event would bring it back.
	retry bool
}

func (e *sourceError) Error() string { return e.message }

// builtSource is what a lock last built from its source, the manifest or
// the refusal, kept so that a sync with the same artifact and path (every
// status write and drift queues one) downloads and builds nothing again.
type builtSource struct {
	digest, path, text string
	err                error
}

// sourceText reads the manifest of ml's spec.sourceRef, and watches the
// source. It returns the manifest and the artifact's revision.
func (c *Controller) sourceText(ctx context.Context, key lockKey, ml *mlv1.ManifestLock, st *manifestState) (text, revision string, err error) {
	ref := ml.Spec.SourceRef
	namespace := ref.Namespace
	if namespace == "" {
		namespace = ml.Namespace
	}
	what := fmt.Sprintf("%s %s/%s", ref.Kind, namespace, ref.Name)
	if namespace != ml.Namespace && ml.Namespace != c.cfg.Namespace {
		c.sources.watch(key, nil)
		return "", "", &sourceError{reason: mlv1.ReasonForbidden, message: fmt.Sprintf("spec.sourceRef names %s: a ManifestLock outside the registration namespace may name a source only in its own namespace, %s; nothing was read", what, ml.Namespace)}
	}
	a, err := c.readSource(ctx, c.sources, key, ref.Kind, namespace, ref.Name)
	var se *sourceError
	if errors.As(err, &se) {
		se.message = "spec.sourceRef: " + se.message
	}
	if err != nil {
		return "", "", err
	}
	st.attempted = a.Revision
	if b := st.built; b.digest == a.Digest && b.path == ml.Spec.Path {
		return b.text, a.Revision, b.err
	}
	text, err = c.buildArtifact(ctx, a, ml.Spec.Path)
	switch {
	case errors.As(err, &se):
		// Refused for what the artifact is: the same one is refused
		// again without another download.
		se.message = fmt.Sprintf("%s, revision %s: %s", what, a.Revision, se.message)
		if !se.retry {
			st.built = builtSource{digest: a.Digest, path: ml.Spec.Path, err: se}
		}
		return "", a.Revision, err
	case err != nil:
		return "", a.Revision, err
	}
	st.built = builtSource{digest: a.Digest, path: ml.Spec.Path, text: text}
	return text, a.Revision, nil
}

// readSource reads the artifact of the Flux source kind namespace/name
// names for key's lock, and has watches watch the source for it (or wait
// for its kind to be served). A source that does not let its artifact be
// read now is a *sourceError.
func (c *Controller) readSource(ctx context.Context, watches *sourceWatches, key lockKey, kind, namespace, name string) (artifact.Artifact, error) {
	what := fmt.Sprintf("%s %s/%s", kind, namespace, name)
	gvr, err := c.sourceResource(kind)
	if err != nil && !meta.IsNoMatchError(err) {
		return artifact.Artifact{}, err
	}
	if err != nil {
		watches.watch(key, nil)
		watches.waitForTypes(key)
		return artifact.Artifact{}, &sourceError{reason: mlv1.ReasonSourceNotServed, message: fmt.Sprintf("%s: the cluster serves no %s.%s (are Flux's source CRDs installed?); it is read once it does", what, kind, mlv1.SourceGroup)}
	}
	watches.watch(key, &source{gvr: gvr, namespace: namespace, name: name})
	obj, err := c.cfg.Dynamic.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return artifact.Artifact{}, &sourceError{reason: mlv1.ReasonSourceNotReady, message: what + " does not exist"}
	case apierrors.IsForbidden(err):
		return artifact.Artifact{}, &sourceError{reason: mlv1.ReasonForbidden, message: fmt.Sprintf("the locker may not read %s: %v", what, err)}
	case err != nil:
		return artifact.Artifact{}, err
	}
	a, ok := artifact.FromStatus(obj.Object)
	if !ok {
		return artifact.Artifact{}, &sourceError{reason: mlv1.ReasonSourceNotReady, message: what + " has no artifact yet (status.artifact)"}
	}
	return a, nil
}

// sourceResource is the resource of a Flux source kind at the newest
// version the cluster serves.
func (c *Controller) sourceResource(kind string) (schema.GroupVersionResource, error) {
	m, err := c.cfg.Mapper.RESTMapping(schema.GroupKind{Group: mlv1.SourceGroup, Kind: kind}, artifact.SourceVersions...)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	return m.Resource, nil
}

// buildArtifact downloads a and builds its folder path, within the
// locker's caps.
func (c *Controller) buildArtifact(ctx context.Context, a artifact.Artifact, path string) (string, error) {
	files, err := c.fetchArtifact(ctx, a)
	if err != nil {
		return "", err
	}
	limits := overlay.Limits{MaxObjects: c.cfg.ArtifactLimits.MaxFiles}
	text, err := overlay.Build(files, path, limits)
	var oe *overlay.Error
	if errors.As(err, &oe) {
		reason := map[overlay.Reason]string{
			overlay.PathNotFound: mlv1.ReasonPathNotFound,
			overlay.BuildFailed:  mlv1.ReasonBuildFailed,
			overlay.TooLarge:     mlv1.ReasonArtifactTooLarge,
		}[oe.Reason]
		return "", &sourceError{reason: reason, message: oe.Message}
	}
	return text, err
}

// fetchArtifact downloads a and unpacks it in memory, within the locker's
// caps, at most artifactBuilds at once. What a is, or a download that
// failed, is a *sourceError.
func (c *Controller) fetchArtifact(ctx context.Context, a artifact.Artifact) (artifact.Files, error) {
	select {
	case c.artifactBuilds <- struct{}{}:
		defer func() { <-c.artifactBuilds }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, artifactTimeout)
	defer cancel()
	client := c.cfg.ArtifactClient
	if client == nil {
		client = http.DefaultClient
	}
	files, err := artifact.Fetch(ctx, client, a, c.cfg.ArtifactLimits)
	var ae *artifact.Error
	if errors.As(err, &ae) {
		reason := map[artifact.Reason]string{
			artifact.DigestMismatch: mlv1.ReasonArtifactDigestMismatch,
			artifact.TooLarge:       mlv1.ReasonArtifactTooLarge,
			artifact.Unsafe:         mlv1.ReasonUnsafeArtifact,
			artifact.Unreadable:     mlv1.ReasonUnsafeArtifact,
			artifact.Unavailable:    mlv1.ReasonSourceNotReady,
		}[ae.Reason]
		return nil, &sourceError{reason: reason, message: ae.Message, retry: ae.Reason == artifact.Unavailable}
	}
	return files, err
}
