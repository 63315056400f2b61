package render

import (
	"bytes"
	"encoding/json"
	"fmt"

	releasev3 "helm.sh/helm/v3/pkg/release"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/helm-locker/helm-locker/internal/storage"
	"github.com/helm-locker/helm-locker/manifest"
)

// Release is a revision of a release read whole, chart and user values
// included, in the types of the Helm that wrote it. Helm 3 and Helm 4
// render some charts differently (a template that writes a value that is
// null in values.yaml, as jenkins' probes: Helm 3 keeps `field: null`,
// Helm 4 leaves the field out), and store a rendered document differently
// (see manifest.Helm). A revision rendered, or its manifest read, as the
// other Helm would, reads as changed when nothing changed; so Render
// renders it with the code of the Helm that wrote it, and Compare reads
// its manifests as that Helm stored them.
//
// Decode makes a Release. Its fields say what it holds, and are not to be
// changed.
type Release struct {
	// Helm is the Helm that wrote the revision, as its release JSON says
	// (storage.Release.Helm).
	Helm manifest.Helm
	// Name, Namespace and Version are the release's, and the revision's.
	Name, Namespace string
	Version         int
	// Manifest is the manifest Helm stored for the revision.
	Manifest string
	// Chart is the chart's name-version, as errors name it.
	Chart string
	// KubeVersion is the chart's kubeVersion constraint, "" for none: a
	// chart that declares one may fail to render on the cluster's
	// Kubernetes version, and render on the next.
	KubeVersion string

	// chartDigest is the digest of the chart and user values the
	// revision's Secret held when it was decoded (see
	// storage.Release.ChartDigest).
	chartDigest string
	// sdk is the revision in its Helm's types, with its Helm's code for
	// what a render does differently.
	sdk sdk
	// description is Helm's description of the revision, which names the
	// revision a rollback went back to (see renderedAt).
	description string
	// dependencies are the names the chart's metadata lists as its
	// dependencies, which Helm does not store.
	dependencies []string
	// readsAPIVersions and readsKubeVersion say whether a template
	// mentions .Capabilities.APIVersions or .Capabilities.KubeVersion.
	readsAPIVersions, readsKubeVersion bool
}

// Trusted is what a lock's verification recorded of the revision whose
// chart it trusts (status.verified): its number, and the digests of its
// manifest and of its chart and user values as Helm stored them. Anyone
// who may write Secrets in the release namespace can rewrite a revision's
// chart and values in place, under its manifest, so only a Secret that
// still holds what was recorded is rendered (see Decode).
type Trusted struct {
	Revision                    int
	ManifestDigest, ChartDigest string
}

// UntrustedError says a revision's Secret no longer holds what its lock
// verified: its manifest, or its chart and values, were rewritten since.
// Nothing of its chart was decoded.
type UntrustedError struct {
	// Secret is the Secret's namespace/name.
	Secret   string
	Revision int
	// What is what differs: "manifest", or "chart and values".
	What string
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("Secret %s no longer holds the %s revision %d was verified with: it was rewritten since, and is not rendered", e.Secret, e.What, e.Revision)
}

// Decode reads the whole release a release Secret stores, chart and user
// values included, which storage.Read leaves out to keep the lock's hot
// path small, once it holds the manifest, chart and values t records. A
// tenant who may write Secrets can write anything into one, so the Secret
// goes through storage.Read's checks (type, labels, name, bounded size, the
// identity it decodes to), inflated once by storage.ReadJSON, and its
// digests are compared with t's before its chart and values are decoded:
// they are rendered as release namespace/name, with lookups as its write
// identity. A Secret rewritten since t was recorded is an
// *UntrustedError; other errors are *storage.InvalidError, naming the
// Secret. The Helm that wrote the revision is storage.Release.Helm's word,
// read from the same JSON, and the release is decoded into that Helm's
// types.
func Decode(secret *corev1.Secret, namespace, name string, t Trusted) (*Release, error) {
	return decode(secret, namespace, name, &t)
}

// DecodeUntrusted is Decode with no verified revision to hold the Secret
// to. It is for `helm-locker diff --rerender` of a release no lock has
// verified, which renders with its user's own credentials and says it
// renders an unverified chart; a lock never calls it.
func DecodeUntrusted(secret *corev1.Secret, namespace, name string) (*Release, error) {
	return decode(secret, namespace, name, nil)
}

func decode(secret *corev1.Secret, namespace, name string, t *Trusted) (*Release, error) {
	stored, raw, err := storage.ReadJSON(secret, namespace, name)
	if err != nil {
		return nil, err
	}
	if t != nil {
		untrusted := &UntrustedError{Secret: secret.Namespace + "/" + secret.Name, Revision: t.Revision}
		switch {
		case stored.Version != t.Revision || storage.Digest(stored.Manifest) != t.ManifestDigest:
			untrusted.What = "manifest"
			return nil, untrusted
		case t.ChartDigest == "" || stored.ChartDigest() != t.ChartDigest:
			// An empty record is a status written before chart
			// digests were kept: nothing says which chart was
			// verified.
			untrusted.What = "chart and values"
			return nil, untrusted
		}
	}
	invalid := func(format string, args ...any) error {
		return &storage.InvalidError{Secret: secret.Namespace + "/" + secret.Name, Problem: fmt.Sprintf(format, args...)}
	}
	// The identity storage.ReadJSON checked is decoded from the same
	// JSON, so it is this release's.
	var rel *Release
	switch h := stored.Helm(); h {
	case manifest.Helm3:
		var v3 releasev3.Release
		if err := json.Unmarshal(raw, &v3); err != nil {
			return nil, invalid("decoding release: %v", err)
		}
		if v3.Chart == nil || v3.Chart.Metadata == nil {
			return nil, invalid("holds no chart to render")
		}
		rel = fromHelm3(&v3)
	default:
		var v4 releasev4.Release
		if err := json.Unmarshal(raw, &v4); err != nil {
			return nil, invalid("decoding release: %v", err)
		}
		if v4.Chart == nil || v4.Chart.Metadata == nil {
			return nil, invalid("holds no chart to render")
		}
		rel = fromHelm4(&v4)
	}
	rel.chartDigest = stored.ChartDigest()
	return rel, nil
}

// ChartDigest is the digest of the chart and user values the revision's
// Secret held when it was decoded: what was verified, for a Release
// Decode returned. An upgrade checks that the Secret still holds them.
func (r *Release) ChartDigest() string { return r.chartDigest }

// AsHelm3 returns the revision in Helm 3's types, which
// internal/upgrade.Upgrade takes. A revision Helm 4 wrote is converted
// through the JSON both Helms store, which loses only its apply method: the
// upgrade reads that from the stored revision, and checks it against
// r.Helm. A revision Helm 3 wrote is returned as decoded, not copied: it
// must not be modified.
func (r *Release) AsHelm3() (*releasev3.Release, error) {
	switch s := r.sdk.(type) {
	case helm3:
		return s.rel, nil
	case helm4:
		raw, err := json.Marshal(s.rel)
		if err != nil {
			return nil, fmt.Errorf("encoding revision %d of release %s/%s: %w", r.Version, r.Namespace, r.Name, err)
		}
		var out releasev3.Release
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("decoding revision %d of release %s/%s in Helm 3's types: %w", r.Version, r.Namespace, r.Name, err)
		}
		return &out, nil
	}
	return nil, fmt.Errorf("revision %d of release %s/%s was not decoded whole", r.Version, r.Namespace, r.Name)
}

// fromHelm3 is a revision Helm 3 wrote, decoded into Helm 3's types.
func fromHelm3(rel *releasev3.Release) *Release {
	r := &Release{Helm: manifest.Helm3, Name: rel.Name, Namespace: rel.Namespace, Version: rel.Version, Manifest: rel.Manifest, sdk: helm3{rel: rel}}
	if rel.Info != nil {
		r.description = rel.Info.Description
	}
	if rel.Chart == nil || rel.Chart.Metadata == nil {
		r.sdk = nil // nothing to render
		return r
	}
	md := rel.Chart.Metadata
	r.Chart, r.KubeVersion = md.Name+"-"+md.Version, md.KubeVersion
	for _, d := range md.Dependencies {
		if d != nil {
			r.dependencies = append(r.dependencies, d.Name)
		}
	}
	for _, t := range rel.Chart.Templates {
		r.readTemplate(t.Data)
	}
	return r
}

// fromHelm4 is a revision Helm 4 wrote, decoded into Helm 4's types.
func fromHelm4(rel *releasev4.Release) *Release {
	r := &Release{Helm: manifest.Helm4, Name: rel.Name, Namespace: rel.Namespace, Version: rel.Version, Manifest: rel.Manifest, sdk: helm4{rel: rel}}
	if rel.Info != nil {
		r.description = rel.Info.Description
	}
	if rel.Chart == nil || rel.Chart.Metadata == nil {
		r.sdk = nil // nothing to render
		return r
	}
	md := rel.Chart.Metadata
	r.Chart, r.KubeVersion = md.Name+"-"+md.Version, md.KubeVersion
	for _, d := range md.Dependencies {
		if d != nil {
			r.dependencies = append(r.dependencies, d.Name)
		}
	}
	for _, t := range rel.Chart.Templates {
		r.readTemplate(t.Data)
	}
	return r
}

// readTemplate notes what of the cluster's capabilities a template reads.
func (r *Release) readTemplate(data []byte) {
	r.readsAPIVersions = r.readsAPIVersions || bytes.Contains(data, []byte("Capabilities.APIVersions"))
	r.readsKubeVersion = r.readsKubeVersion || bytes.Contains(data, []byte("Capabilities.KubeVersion"))
}
