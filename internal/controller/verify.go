package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/internal/storage"
)

// trust is what the controller trusts of a release: the last verified
// revision, and a digest of each of its objects, so that a newer revision's
// objects carried over unchanged need no proof.
type trust struct {
	verified *v1alpha1.VerifiedRevision
	// objects are the digests of the verified revision's objects; nil
	// when they are not known (the revision's Secret is gone or was
	// rewritten since).
	objects objectDigests
}

// candidate is a revision the lock holds before it is verified.
type candidate struct {
	record  v1alpha1.VerifiedRevision
	objects objectDigests
	// chart is the chart the verified revision trusts, which the
	// candidate's record names in its own's place unless Helm is seen
	// to apply the candidate (see verified).
	chart *v1alpha1.ChartRevision
}

// manifestDigest is the sha256 of a manifest, as a VerifiedRevision and a
// ManifestLock record it.
func manifestDigest(m string) string { return storage.Digest(m) }

// objectID names a manifest object as the manifest does: the same ID in
// two revisions of one release is the same object.
func objectID(obj *unstructured.Unstructured) string {
	return strings.Join([]string{obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName()}, "/")
}

// objectDigest is the sha256 of a manifest object's ID and content. One is
// kept per locked object, so it is a value with no pointers for the
// garbage collector to follow. encoding/json writes map keys sorted, so
// equal objects have equal digests. The JSON goes straight into the hash,
// from the encoder's pooled buffer: a first sync digests every object.
// Digests are kept in memory only, so how they are computed may change.
func objectDigest(obj *unstructured.Unstructured) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(objectID(obj)))
	h.Write([]byte{0})
	// An object that cannot be encoded, never one decoded from a
	// manifest, writes nothing: it matches no digest but the ID's own.
	_ = json.NewEncoder(h).Encode(obj.Object)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// objectDigests are a revision's objects' digests, sorted: an object is in
// it only when an object of the revision has its ID and content.
type objectDigests [][sha256.Size]byte

func digestsOf(objs []*unstructured.Unstructured) objectDigests {
	out := make(objectDigests, 0, len(objs))
	for _, obj := range objs {
		out = append(out, objectDigest(obj))
	}
	slices.SortFunc(out, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// has reports whether the revision had obj as it is.
func (d objectDigests) has(obj *unstructured.Unstructured) bool {
	sum := objectDigest(obj)
	_, found := slices.BinarySearchFunc(d, sum, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	return found
}

// verification decides how far the lock may trust rel, the release's
// latest deployed revision, read from the Secret described by latest, and
// returns what the engine must verify (nil to take it on trust).
//
// A release Secret is no proof: anyone who may write Secrets in the release
// namespace can write one. What Helm really applied is: Helm writes a
// revision's objects after it creates the revision's Secret and before it
// marks the revision deployed, and its writes are recorded in each object's
// managedFields, which a Secret writer cannot forge. So:
//   - the first lock of a release trusts its current revision: creating
//     the CR is the admin's act;
//   - a revision the CR's status records as verified, with the same
//     manifest, is trusted again, after a restart too;
//   - any other revision is held only as far as the engine sees Helm's
//     writes of it, at or after its Secret was created; objects carried
//     over unchanged from the verified revision are trusted.
func (c *Controller) verification(ctx context.Context, st *releaseState, latest *metav1.PartialObjectMetadata, rel *storage.Release, objs []*unstructured.Unstructured) *engine.Verification {
	rk := st.release
	record := v1alpha1.VerifiedRevision{Release: rk, Revision: rel.Version, ManifestDigest: manifestDigest(rel.Manifest), ChartDigest: rel.ChartDigest()}
	digests := digestsOf(objs)
	v := st.trust.verified
	switch {
	case v == nil:
		klog.FromContext(ctx).V(2).Info("First lock of the release: trusting its current revision", "release", rk.Namespace+"/"+rk.Name, "revision", rel.Version)
		st.trust = trust{verified: &record, objects: digests}
		st.candidate = nil
		return nil
	case v.Release == record.Release && v.Revision == record.Revision && v.ManifestDigest == record.ManifestDigest:
		if st.trust.objects == nil {
			st.trust.objects = digests
		}
		if v.ChartDigest == "" {
			// A status written before chart digests were kept: the
			// revision it verified is trusted again, as it was, and
			// its chart as it is now.
			v.ChartDigest = record.ChartDigest
		}
		st.candidate = nil
		return nil
	}
	// The verified revision's objects, read again for each new
	// revision: what the new one changes is held as they have it until
	// Helm is seen to apply it.
	verifiedObjs := c.verifiedObjects(ctx, latest.Namespace, *v)
	if st.trust.objects == nil && verifiedObjs != nil {
		st.trust.objects = digestsOf(verifiedObjs)
	}
	if !slices.ContainsFunc(objs, func(obj *unstructured.Unstructured) bool { return !st.trust.objects.has(obj) }) {
		// Every object is carried over: Helm will never be seen to
		// apply this revision, so its chart, which a Secret writer
		// may have forged, is not trusted; the verified one's is.
		record.Chart = chartOf(v)
	}
	st.candidate = &candidate{record: record, objects: digests, chart: chartOf(v)}
	since := latest.CreationTimestamp.Time
	if rel.Version <= v.Revision {
		// Helm never rewrites a revision's manifest, nor goes back to
		// an older number: no write of Helm's can be of this one.
		since = time.Time{}
	}
	trusted := st.trust.objects
	needed := func(obj *unstructured.Unstructured) bool { return !trusted.has(obj) }
	return &engine.Verification{
		Owners:   c.cfg.HelmManagers,
		Since:    since,
		Needed:   needed,
		Fallback: fallbacks(c.cfg.Mapper, rk.Namespace, verifiedObjs, objs, needed),
	}
}

// fallbacks returns the engine's Verification.Fallback of a new revision
// whose objects are objs: the verified revision's form of each object the
// new one changes (needed), matched by the object they name, not by how
// the manifest spells it. A revision that writes out the namespace Helm
// defaults to the release's, or names another version of the same kind,
// declares the same object; with no fallback, a write of Helm's to it in
// the second the revision's Secret was created, which managedFields cannot
// order, would count as Helm applying the revision (see
// engine.Result.Applied), and trust the revision's chart.
func fallbacks(mapper meta.RESTMapper, namespace string, verifiedObjs, objs []*unstructured.Unstructured, needed func(*unstructured.Unstructured) bool) func(*unstructured.Unstructured) *unstructured.Unstructured {
	id := func(obj *unstructured.Unstructured) string { return liveID(mapper, obj, namespace) }
	changed := make(map[string]*unstructured.Unstructured, len(verifiedObjs))
	for _, obj := range verifiedObjs {
		changed[id(obj)] = obj
	}
	for _, obj := range objs {
		if !needed(obj) {
			delete(changed, id(obj))
		}
	}
	return func(obj *unstructured.Unstructured) *unstructured.Unstructured { return changed[id(obj)] }
}

// liveID names the object a manifest object of a release in namespace is
// applied as: its group, kind and name, and its namespace: none ("-",
// which no namespace is named) for a cluster-scoped kind, whatever the
// manifest says, and the release's for a namespaced one that names none.
// A kind the mapper does not know is taken as namespaced.
func liveID(mapper meta.RESTMapper, obj *unstructured.Unstructured, namespace string) string {
	gvk := obj.GroupVersionKind()
	ns := obj.GetNamespace()
	if mapper != nil {
		if m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil && m.Scope.Name() != meta.RESTScopeNameNamespace {
			ns = "-"
		}
	}
	if ns == "" {
		ns = namespace
	}
	return strings.Join([]string{gvk.Group, gvk.Kind, ns, obj.GetName()}, "/")
}

// chartOf is the revision whose chart v trusts: v's own, or the one v
// names.
func chartOf(v *v1alpha1.VerifiedRevision) *v1alpha1.ChartRevision {
	chart := v.TrustedChart()
	return &chart
}

// verified records that the candidate revision was verified: every object
// of it is as it declares. Its own chart is trusted only when applied says
// Helm was seen to apply it (engine.Result.Applied): a write of Helm's, at
// or after its Secret was created, to an object it changed. Objects that
// were already as declared prove nothing, since a Secret writer can
// restate what is live in another form (a namespace written out, a
// server default spelled out) and have every object "in line" without
// any write; such a revision is held, but its chart is the last trusted
// one's.
func (st *releaseState) verified(applied bool) {
	c := st.candidate
	if c == nil {
		return
	}
	if c.record.Chart == nil && !applied {
		c.record.Chart = c.chart
	}
	st.trust = trust{verified: &c.record, objects: c.objects}
	st.candidate = nil
}

// verifiedObjects reads the objects of the verified revision v from its
// Secret, if it is still there and its manifest is the one verified. Their
// digests let a newer revision's unchanged objects be held without proof,
// after a restart too; without them every object of the newer revision
// must be proved. The objects themselves are held until the newer
// revision's are verified (see engine.Verification.Fallback).
func (c *Controller) verifiedObjects(ctx context.Context, namespace string, v v1alpha1.VerifiedRevision) []*unstructured.Unstructured {
	logger := klog.FromContext(ctx)
	objs, err := c.secrets.GetIndexer().ByIndex(byRelease, v.Release.Namespace+"/"+v.Release.Name)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok || m.Namespace != namespace {
			continue
		}
		if revision, ok := storage.Revision(m); !ok || revision != v.Revision {
			continue
		}
		rel, relObjs, err := c.readRelease(ctx, v.Release, m)
		if err != nil {
			logger.V(2).Info("Cannot read the verified revision; every object of the new one must be proved", "secret", klog.KObj(m), "err", err)
			return nil
		}
		if manifestDigest(rel.Manifest) != v.ManifestDigest {
			logger.Info("The verified revision's Secret was rewritten since it was verified; not trusting it", "secret", klog.KObj(m))
			return nil
		}
		return relObjs
	}
	return nil
}

// unverifiedMessage says why an object of revision is not held.
func unverifiedMessage(revision int, u engine.Unverified) string {
	what := objectName(u.Kind, u.Ref)
	const held = "it is held as the last verified revision has it, if that has it"
	switch {
	case u.Missing:
		return fmt.Sprintf("revision %d: %s does not exist, so Helm did not apply it; %s", revision, what, held)
	case len(u.Owned) > 0:
		return fmt.Sprintf("revision %d: %s differs at %s, where Helm applied other values; %s", revision, what, strings.Join(u.Owned, ", "), held)
	default:
		return fmt.Sprintf("revision %d: %s differs at %s, and Helm has not written it since the revision was created; %s", revision, what, strings.Join(u.Paths, ", "), held)
	}
}
