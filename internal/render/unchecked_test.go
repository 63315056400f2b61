package render

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDecodeUncheckedRoundTrip: a revision of each Helm, encoded for a
// sandbox and decoded there, renders as the revision it was encoded from,
// with the same reading of its templates.
func TestDecodeUncheckedRoundTrip(t *testing.T) {
	for _, h := range helms {
		t.Run(h.String(), func(t *testing.T) {
			rel := as(t, h, releaseOf(loadDashboard(t), map[string]any{"adminPassword": "s3cret"}, 2))
			raw, err := rel.EncodeForSandbox()
			if err != nil {
				t.Fatal(err)
			}
			again, err := DecodeUnchecked(rel.Helm, raw)
			if err != nil {
				t.Fatal(err)
			}
			if encoded, err := again.EncodeForSandbox(); err != nil || string(encoded) != string(raw) {
				t.Errorf("encoded again (%v):\n%s\nwant\n%s", err, encoded, raw)
			}
			read, readAgain := *rel, *again
			read.sdk, readAgain.sdk = nil, nil
			if diff := cmp.Diff(read, readAgain, cmp.AllowUnexported(Release{})); diff != "" {
				t.Errorf("what the release says of itself, decoded again (-want +got):\n%s", diff)
			}
			c, _ := fakeCluster()
			want, err := Render(context.Background(), rel, c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Render(context.Background(), again, c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("render of the release decoded again (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := DecodeUnchecked(5, []byte("{}")); err == nil {
		t.Error("DecodeUnchecked of Helm 5 succeeded")
	}
}

// TestDecodeUncheckedIsTheSandboxs: only internal/sandbox calls
// DecodeUnchecked. A release Secret is read through Decode's checks; what
// DecodeUnchecked reads is what its parent encoded from one.
func TestDecodeUncheckedIsTheSandboxs(t *testing.T) {
	root := filepath.Join("..", "..")
	allowed := map[string]bool{filepath.Join("internal", "render"): true, filepath.Join("internal", "sandbox"): true}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || allowed[filepath.Dir(rel)] {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), "DecodeUnchecked(") {
			t.Errorf("%s calls render.DecodeUnchecked; only internal/sandbox may", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
