package render

import (
	"encoding/json"
	"fmt"

	releasev3 "helm.sh/helm/v3/pkg/release"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"

	"github.com/helm-locker/helm-locker/manifest"
)

// What follows carries a Release Decode made to a process that renders it
// (internal/sandbox's child), and nowhere else: the child decodes again
// what its parent, which checked the release Secret, encoded.

// sandboxRelease is what EncodeForSandbox encodes: the release JSON Helm
// stores, and the files of the chart's source when it renders one (see
// Release.WithChart), which that JSON cannot carry: Helm's types keep a
// chart's dependencies out of it.
type sandboxRelease struct {
	Release json.RawMessage `json:"release"`
	Chart   []chartFile     `json:"chart,omitempty"`
}

// EncodeForSandbox is r as the release JSON Helm stores, in the types of
// the Helm that wrote it, with its chart's source if it has one, for
// DecodeUnchecked in a sandbox's child.
func (r *Release) EncodeForSandbox() ([]byte, error) {
	var rel any
	var source []chartFile
	switch s := r.sdk.(type) {
	case helm3:
		rel, source = s.rel, s.source
	case helm4:
		rel, source = s.rel, s.source
	default:
		return nil, fmt.Errorf("revision %d of release %s/%s has no chart to render", r.Version, r.Namespace, r.Name)
	}
	raw, err := json.Marshal(rel)
	if err == nil {
		raw, err = json.Marshal(sandboxRelease{Release: raw, Chart: source})
	}
	if err != nil {
		return nil, fmt.Errorf("encoding revision %d of release %s/%s: %w", r.Version, r.Namespace, r.Name, err)
	}
	return raw, nil
}

// DecodeUnchecked decodes what EncodeForSandbox encoded, as Helm h wrote
// it. It checks nothing Decode checks of a release Secret (its type,
// labels, name, size, or the identity it decodes to): it is the sandbox
// child's way to the Release its parent decoded, and never a way to read
// a tenant's Secret. TestDecodeUncheckedIsTheSandboxs holds it to that.
// A chart's source is checked against the stored chart again, as
// WithChart checks it.
func DecodeUnchecked(h manifest.Helm, raw []byte) (*Release, error) {
	var sr sandboxRelease
	if err := json.Unmarshal(raw, &sr); err != nil {
		return nil, fmt.Errorf("decoding the release: %w", err)
	}
	var rel *Release
	switch h {
	case manifest.Helm3:
		var v3 releasev3.Release
		if err := json.Unmarshal(sr.Release, &v3); err != nil {
			return nil, fmt.Errorf("decoding the release: %w", err)
		}
		if v3.Chart == nil || v3.Chart.Metadata == nil {
			return nil, fmt.Errorf("the release holds no chart to render")
		}
		rel = fromHelm3(&v3)
	case manifest.Helm4:
		var v4 releasev4.Release
		if err := json.Unmarshal(sr.Release, &v4); err != nil {
			return nil, fmt.Errorf("decoding the release: %w", err)
		}
		if v4.Chart == nil || v4.Chart.Metadata == nil {
			return nil, fmt.Errorf("the release holds no chart to render")
		}
		rel = fromHelm4(&v4)
	default:
		return nil, fmt.Errorf("no Helm %d to decode the release as", h)
	}
	if sr.Chart == nil {
		return rel, nil
	}
	files := make(map[string][]byte, len(sr.Chart))
	for _, f := range sr.Chart {
		files[f.Name] = f.Data
	}
	return rel.WithChart(files)
}
