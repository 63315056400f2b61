package storage

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"

	"github.com/helm-locker/helm-locker/manifest"
)

// encode stores a release the way Helm's Secret driver does, as the API
// server returns it in Secret.Data.
func encode(t testing.TB, json string, compress bool) []byte {
	t.Helper()
	raw := []byte(json)
	if compress {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(raw)
		_ = zw.Close()
		raw = buf.Bytes()
	}
	return []byte(base64.StdEncoding.EncodeToString(raw))
}

const releaseJSON = `{"name":"web","namespace":"apps","version":3,"info":{"status":"deployed","description":"Upgrade complete","notes":"hi"},"manifest":"---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  port: \"80\"\n","apply_method":"ssa","chart":{"templates":[{"name":"big","data":"AAAA"}]}}`

func TestDecode(t *testing.T) {
	for _, compress := range []bool{true, false} {
		rel, err := Decode(encode(t, releaseJSON, compress))
		if err != nil {
			t.Fatalf("compress=%v: %v", compress, err)
		}
		if rel.Name != "web" || rel.Namespace != "apps" || rel.Version != 3 || rel.Info.Status != release.StatusDeployed || rel.ApplyMethod != ApplyMethodServerSide {
			t.Errorf("compress=%v: decoded %+v", compress, rel)
		}
		if rel.Info.Description != "Upgrade complete" || rel.Info.Notes != "hi" {
			t.Errorf("compress=%v: info %+v", compress, rel.Info)
		}
	}
}

func TestDecodeReleaseErrors(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"not base64", "%%%", "not base64"},
		{"not JSON", base64.StdEncoding.EncodeToString([]byte("{")), "decoding release"},
		{"truncated gzip", base64.StdEncoding.EncodeToString([]byte{0x1f, 0x8b, 0x08, 0}), "decoding release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeRelease error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestObjectsAsTheHelmThatWroteIt: a release's objects are what the Helm
// that wrote it applied, and the release JSON says which Helm that was.
// harbor's "|+" config, last in its document, keeps its blank line only as
// Helm 4 stores and applies it.
func TestObjectsAsTheHelmThatWroteIt(t *testing.T) {
	const doc = "---\n# Source: h/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: jobservice\ndata:\n  config.yml: |+\n    port: 8080\n"
	tests := []struct {
		applyMethod string
		manifest    string
		helm        manifest.Helm
		want        string
	}{
		// Helm 3 stores the trimmed document.
		{"", doc, manifest.Helm3, "port: 8080\n"},
		// Helm 4 stores it as the template left it, a line break added.
		{"ssa", doc + "\n\n", manifest.Helm4, "port: 8080\n\n\n"},
		{"csa", doc + "\n\n", manifest.Helm4, "port: 8080\n\n\n"},
	}
	for _, tt := range tests {
		json := `{"name":"web","namespace":"apps","version":1,"info":{"status":"deployed"},"manifest":` + strconv.Quote(tt.manifest)
		if tt.applyMethod != "" {
			json += `,"apply_method":"` + tt.applyMethod + `"`
		}
		rel, err := Decode(encode(t, json+"}", true))
		if err != nil {
			t.Fatal(err)
		}
		if rel.Helm() != tt.helm {
			t.Errorf("apply_method %q: written by %v, want %v", tt.applyMethod, rel.Helm(), tt.helm)
		}
		objs, err := rel.Objects()
		if err != nil {
			t.Fatal(err)
		}
		if got := objs[0].Object["data"].(map[string]any)["config.yml"]; got != tt.want {
			t.Errorf("apply_method %q: config.yml = %q, want %q", tt.applyMethod, got, tt.want)
		}
	}
}

func TestObjectsErrorsNameTheDocument(t *testing.T) {
	tests := []struct {
		name, manifest, want string
	}{
		{"no kind", "# Source: web/templates/a.yaml\napiVersion: v1\nmetadata: {name: a}\n", "release apps/web revision 7, web/templates/a.yaml: object has no kind"},
		{"no name", "# Source: web/templates/b.yaml\napiVersion: v1\nkind: ConfigMap\n", "web/templates/b.yaml: ConfigMap has no metadata.name"},
		{"bad YAML", "apiVersion: v1\nkind: [\n", "document 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := (&Release{Name: "web", Namespace: "apps", Version: 7, Manifest: tt.manifest}).Objects()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Objects error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDecodeBounded: a release that inflates past MaxInflated is refused
// before it is inflated, one at the bound is read, and one that inflates
// past what its gzip trailer says, which Helm's gzip never does, is
// refused once it does.
func TestDecodeBounded(t *testing.T) {
	// bomb is a release whose JSON is padded with n spaces, which gzip
	// shrinks about a thousand times.
	bomb := func(n int) []byte {
		return encode(t, releaseJSON[:len(releaseJSON)-1]+strings.Repeat(" ", n)+"}", true)
	}
	atBound := bomb(MaxInflated - len(releaseJSON))
	if len(atBound) > MaxStored {
		t.Fatalf("the test's release at the bound takes %d bytes stored; want one a Secret can hold", len(atBound))
	}
	if rel, err := Decode(atBound); err != nil || rel.Version != 3 {
		t.Errorf("Decode of a release of %d bytes = %+v, %v; want it read", MaxInflated, rel, err)
	}
	if _, err := Decode(bomb(MaxInflated - len(releaseJSON) + 1)); err == nil || !strings.Contains(err.Error(), "it inflates to 33554433 bytes, more than the 33554432 (32 MiB) a release's JSON may take") {
		t.Errorf("Decode of a release one byte past the bound = %v", err)
	}
	if _, err := DecodeJSON(bomb(100 << 20)); err == nil || !strings.Contains(err.Error(), "a release's JSON may take") {
		t.Errorf("DecodeJSON of a 100 MiB release = %v", err)
	}
	if _, err := Decode(bytes.Repeat([]byte("A"), MaxStored+4)); err == nil || !strings.Contains(err.Error(), "more than a Secret may hold") {
		t.Errorf("Decode of more than a Secret holds = %v", err)
	}

	// A trailer that understates the size: a 4 GiB and 1 KiB bomb's
	// says 1 KiB, as would a crafted one.
	gz, _ := base64.StdEncoding.DecodeString(string(bomb(1 << 20)))
	binary.LittleEndian.PutUint32(gz[len(gz)-4:], 1024)
	if _, err := Decode([]byte(base64.StdEncoding.EncodeToString(gz))); err == nil || !strings.Contains(err.Error(), "inflates past the 1024 bytes its gzip trailer gives") {
		t.Errorf("Decode of a release whose trailer says less than it holds = %v", err)
	}
}

// TestBudget: a take that does not fit waits for what is given back.
func TestBudget(t *testing.T) {
	b := newBudget(10)
	b.take(7)
	took := make(chan struct{})
	go func() {
		b.take(5)
		close(took)
	}()
	select {
	case <-took:
		t.Fatal("5 bytes were taken of the 3 left")
	case <-time.After(50 * time.Millisecond):
	}
	b.give(7)
	select {
	case <-took:
	case <-time.After(5 * time.Second):
		t.Fatal("5 bytes were not taken once 10 were left")
	}
	if b.left != 5 {
		t.Errorf("left %d, want 5", b.left)
	}
}
