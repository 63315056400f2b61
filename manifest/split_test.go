package manifest

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// helmSplit is how Helm itself splits a manifest, in order.
func helmSplit(manifest string) []string {
	docs := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = docs[k]
	}
	return out
}

var splitCases = []string{
	"",
	"   \n\t ",
	"a: 1",
	"---\na: 1\n---\nb: 2\n",
	"---\n# Source: c/templates/a.yaml\na: 1\n---\n# Source: c/templates/b.yaml\nb: 2",
	"a: 1\n---\n---\nb: 2",
	"---\n---\nfoo",
	"a \t\n---b",
	"a: 1\n--- \n\n  b: 2",
	"a: |\n  ---\n  not a separator\nb: 2",
	"a: 1\n----\nb: 2",
	"a: 1\n---\n",
	"a: 1\r\n---\r\nb: 2\r\n",
	"a: 1\n \v\n---\nb: 2\n---\n\v\n---\nc: 3",
	"x---y\n---",
	"\f---\fa",
}

func TestSplitDocumentsIsHelms(t *testing.T) {
	for _, in := range splitCases {
		if diff := cmp.Diff(helmSplit(in), splitDocuments(in)); diff != "" {
			t.Errorf("splitDocuments(%q) (-Helm +got):\n%s", in, diff)
		}
	}
}

// FuzzSplitDocuments holds splitDocuments to Helm's split on any input.
func FuzzSplitDocuments(f *testing.F) {
	for _, in := range splitCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if diff := cmp.Diff(helmSplit(in), splitDocuments(in)); diff != "" {
			t.Errorf("splitDocuments(%q) (-Helm +got):\n%s", in, diff)
		}
	})
}
