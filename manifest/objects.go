package manifest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// DocumentError says which document of a manifest could not be turned into
// an object, and why.
type DocumentError struct {
	// Source is the template the document came from (Helm's "# Source:"
	// comment), or its position in the manifest, as "document 3".
	Source string
	Err    error
}

func (e *DocumentError) Error() string { return e.Source + ": " + e.Err.Error() }

func (e *DocumentError) Unwrap() error { return e.Err }

// Parse reads manifests as kubectl apply -f does: YAML or JSON, any number
// of documents separated by "---" lines, Lists flattened into their items,
// and documents of only comments skipped. It takes the output of
// kustomize build, helm template or helmfile unchanged. Objects are
// returned in manifest order, with metadata.namespace as written: whether
// an object without one takes a default depends on its kind's scope, which
// only the API server knows.
func Parse(r io.Reader) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, &DocumentError{Source: fmt.Sprintf("document %d", i+1), Err: err}
		}
		parsed, err := parseDocument(doc)
		if err != nil {
			return nil, &DocumentError{Source: source(string(doc), i), Err: err}
		}
		objs = append(objs, parsed...)
	}
}

// Helm is the major version of the Helm that stored a release. Helm 3 and
// Helm 4 store a chart's rendered documents differently, and each applies
// the manifest as it stored it, so a lock must read a revision as the Helm
// that wrote it: one reading for both declares, for some values, what that
// Helm never applied.
type Helm int

const (
	// Helm3 trims each rendered document before it stores it
	// (releaseutil.SplitManifests): a "|+" block scalar at the end of a
	// document keeps one line break.
	Helm3 Helm = 3
	// Helm4 trims only the whitespace before each document, and applies
	// the stored manifest through a YAML stream decoder: a "|+" block
	// scalar at the end of a document keeps the blank lines after it.
	Helm4 Helm = 4
)

func (h Helm) String() string { return "Helm " + strconv.Itoa(int(h)) }

// ParseRelease parses a release's manifest as Helm h stored it, into the
// objects h applied, in manifest order. Hooks are not part of a stored
// manifest, and neither are CRDs from a chart's crds/ folder, so neither
// is returned. Any version other than Helm3 reads as Helm4.
func ParseRelease(manifest string, h Helm) ([]*unstructured.Unstructured, error) {
	if h == Helm3 {
		return parseHelm3(manifest)
	}
	// Helm 4 applies its stored manifest as kubectl applies a file
	// (kube.Client.Build, a resource.Builder stream), and stores each
	// document as the template left it after the leading whitespace:
	// the stream reads back exactly what Helm 4 applied.
	return Parse(strings.NewReader(manifest))
}

// ParseHelm parses a manifest as Helm 3 stored it.
//
// Deprecated: a release Helm 4 stored reads differently; use ParseRelease
// with the Helm that wrote the release.
func ParseHelm(manifest string) ([]*unstructured.Unstructured, error) {
	return ParseRelease(manifest, Helm3)
}

// parseHelm3 splits a manifest as Helm 3's releaseutil.SplitManifests does
// (see splitDocuments). On what Helm 3 stores it gives the documents Helm
// 3's apply path reads from the stream (FuzzParseReleaseHelm3 holds it to
// that); on a manifest written otherwise it reads as Helm 3 would have
// stored it.
func parseHelm3(manifest string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for i, doc := range splitDocuments(manifest) {
		// Helm 3 stores each document as its template's trimmed
		// output and one line break, and applies it as its YAML
		// reader splits it, line break included. splitDocuments
		// trims it, as SplitManifests does; without it back, a block
		// scalar that ends a document ("|" keeps one final line
		// break) would lose the line break Helm applied, and the
		// lock would "correct" every such value.
		parsed, err := parseDocument([]byte(doc + "\n"))
		if err != nil {
			return nil, &DocumentError{Source: source(doc, i), Err: err}
		}
		objs = append(objs, parsed...)
	}
	return objs, nil
}

// parseDocument decodes one YAML document. It returns nothing for a document
// that holds only comments or whitespace.
func parseDocument(doc []byte) ([]*unstructured.Unstructured, error) {
	if obj, ok := decodeObject(doc); ok {
		return []*unstructured.Unstructured{obj}, nil
	}
	return parseJSON(doc)
}

// parseJSON is parseDocument the slow way, through the document's JSON:
// for the documents decodeObject leaves, and for the errors that name what
// is wrong with them.
func parseJSON(doc []byte) ([]*unstructured.Unstructured, error) {
	data, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	if string(data) == "null" {
		return nil, nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("document is not an object: %w", err)
	}
	if head.APIVersion == "" {
		return nil, fmt.Errorf("object has no apiVersion")
	}
	if head.Kind == "" {
		return nil, fmt.Errorf("object has no kind")
	}
	obj := &unstructured.Unstructured{}
	// UnmarshalJSON keeps integers as int64, as objects read from the API
	// server have them, so that equal values compare equal.
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	if isList(obj) {
		list, err := obj.ToList()
		if err != nil {
			return nil, err
		}
		var objs []*unstructured.Unstructured
		for i := range list.Items {
			item := &list.Items[i]
			if err := validate(item); err != nil {
				return nil, fmt.Errorf("List item %d: %w", i, err)
			}
			objs = append(objs, item)
		}
		return objs, nil
	}
	if err := validate(obj); err != nil {
		return nil, err
	}
	return []*unstructured.Unstructured{obj}, nil
}

// isList reports whether the API machinery's unstructured decoder, which
// kubectl and Helm read manifests with, takes obj for a List: any object
// with "items", whatever they hold. A List with no items declares nothing.
func isList(obj *unstructured.Unstructured) bool {
	_, ok := obj.Object["items"]
	return ok
}

// validate rejects objects the API server could not take. An object named
// by metadata.generateName alone is valid: the API server names it, anew
// at each apply; callers that need fixed names set it aside.
func validate(obj *unstructured.Unstructured) error {
	switch {
	case obj.GetAPIVersion() == "":
		return fmt.Errorf("object has no apiVersion")
	case obj.GetKind() == "":
		return fmt.Errorf("object has no kind")
	case obj.GetName() == "" && obj.GetGenerateName() == "":
		return fmt.Errorf("%s has no metadata.name", obj.GetKind())
	}
	return nil
}

// source returns the template path Helm writes as "# Source: ..." at the
// top of every rendered document.
func source(doc string, index int) string {
	for line := range strings.SplitSeq(doc, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return s
		}
	}
	return fmt.Sprintf("document %d", index+1)
}
