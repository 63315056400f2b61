package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entry is one tar entry of a test archive.
type entry struct {
	name, body, link string
	typ              byte
}

func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnpack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		limits  Limits
		want    Files
		reason  Reason
		says    string
	}{
		{
			name: "files and folders",
			entries: []entry{
				{name: "./", typ: tar.TypeDir}, {name: "./base/", typ: tar.TypeDir},
				{name: "./base/kustomization.yaml", body: "resources: [cm.yaml]"}, {name: "base/cm.yaml", body: "kind: ConfigMap"},
			},
			want: Files{"base/kustomization.yaml": []byte("resources: [cm.yaml]"), "base/cm.yaml": []byte("kind: ConfigMap")},
		},
		{name: "a symlink", entries: []entry{{name: "a.yaml", body: "x"}, {name: "b.yaml", typ: tar.TypeSymlink, link: "/etc/passwd"}}, reason: Unsafe, says: "b.yaml is a link to /etc/passwd"},
		{name: "a symlink to a file inside", entries: []entry{{name: "a.yaml", body: "x"}, {name: "b.yaml", typ: tar.TypeSymlink, link: "a.yaml"}}, reason: Unsafe, says: "b.yaml is a link"},
		{name: "a hard link", entries: []entry{{name: "a.yaml", body: "x"}, {name: "b.yaml", typ: tar.TypeLink, link: "a.yaml"}}, reason: Unsafe, says: "b.yaml is a link"},
		{name: "a device", entries: []entry{{name: "null", typ: tar.TypeChar}}, reason: Unsafe, says: "null is of tar type"},
		{name: "a path that climbs out", entries: []entry{{name: "base/../../etc/x.yaml", body: "x"}}, reason: Unsafe, says: "base/../../etc/x.yaml leaves the artifact's folder"},
		{name: "an absolute path", entries: []entry{{name: "/etc/x.yaml", body: "x"}}, reason: Unsafe, says: "/etc/x.yaml leaves"},
		{name: "a file twice", entries: []entry{{name: "a.yaml", body: "x"}, {name: "./a.yaml", body: "y"}}, reason: Unsafe, says: "a.yaml is in the artifact twice"},
		{name: "too many files", entries: []entry{{name: "a", body: "x"}, {name: "b", body: "y"}, {name: "c", body: "z"}}, limits: Limits{MaxFiles: 2}, reason: TooLarge, says: "more than 2 files"},
		{name: "too many folders", entries: []entry{{name: "a/", typ: tar.TypeDir}, {name: "b/", typ: tar.TypeDir}, {name: "c/", typ: tar.TypeDir}}, limits: Limits{MaxFiles: 2}, reason: TooLarge, says: "more than 2 files"},
		{name: "too many bytes", entries: []entry{{name: "a", body: "12345"}, {name: "b", body: "67890"}}, limits: Limits{MaxUnpacked: 8}, reason: TooLarge, says: "more than 8 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Unpack(bytes.NewReader(archive(t, tc.entries...)), tc.limits)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("files (-want +got):\n%s", diff)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Reason != tc.reason || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Unpack: %v (files %v), want a %s error saying %q", err, got, tc.reason, tc.says)
			}
		})
	}
	if _, err := Unpack(strings.NewReader("plain text"), Limits{}); err == nil || !strings.Contains(err.Error(), "not a gzip stream") {
		t.Errorf("Unpack of plain text: %v", err)
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestFetch(t *testing.T) {
	good := archive(t, entry{name: "cm.yaml", body: "kind: ConfigMap"})
	big := archive(t, entry{name: "big.yaml", body: strings.Repeat("x", 1<<20)})
	served := map[string][]byte{"/good.tar.gz": good, "/big.tar.gz": big}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := served[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Has("chunked") {
			w.(http.Flusher).Flush() // no Content-Length: the cap must hold on the stream
		}
		_, _ = w.Write(data)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name   string
		a      Artifact
		limits Limits
		reason Reason
		says   string
	}{
		{name: "as its status says", a: Artifact{URL: srv.URL + "/good.tar.gz", Digest: digestOf(good)}},
		{name: "another digest", a: Artifact{URL: srv.URL + "/good.tar.gz", Digest: digestOf(big)}, reason: DigestMismatch, says: "not the " + digestOf(big)},
		{name: "a digest of another algorithm", a: Artifact{URL: srv.URL + "/good.tar.gz", Digest: "sha512:00"}, reason: DigestMismatch, says: "is not a sha256 digest"},
		{name: "past the download cap", a: Artifact{URL: srv.URL + "/big.tar.gz", Digest: digestOf(big)}, limits: Limits{MaxDownload: 512}, reason: TooLarge, says: "past the cap of 512"},
		{name: "past the download cap, streamed", a: Artifact{URL: srv.URL + "/big.tar.gz?chunked=1", Digest: digestOf(big)}, limits: Limits{MaxDownload: 512}, reason: TooLarge, says: "past the cap of 512"},
		{name: "past the unpacked cap", a: Artifact{URL: srv.URL + "/big.tar.gz", Digest: digestOf(big)}, limits: Limits{MaxUnpacked: 1 << 10}, reason: TooLarge, says: "more than 1024 bytes unpacked"},
		{name: "not served", a: Artifact{URL: srv.URL + "/gone.tar.gz", Digest: digestOf(good)}, reason: Unavailable, says: "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.a.Revision = "main@sha1:abc"
			files, err := Fetch(t.Context(), srv.Client(), tc.a, tc.limits)
			if tc.reason == "" {
				if err != nil || string(files["cm.yaml"]) != "kind: ConfigMap" {
					t.Fatalf("Fetch: %v, files %v", err, files)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Reason != tc.reason || e.Revision != "main@sha1:abc" || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Fetch: %v, want a %s error of revision main@sha1:abc saying %q", err, tc.reason, tc.says)
			}
		})
	}
}

func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(p, body string) {
		t.Helper()
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("base/kustomization.yaml", "resources: [cm.yaml]")
	write("base/cm.yaml", "kind: ConfigMap")
	files, err := ReadDir(dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Files{"base/kustomization.yaml": []byte("resources: [cm.yaml]"), "base/cm.yaml": []byte("kind: ConfigMap")}, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if _, err := ReadDir(dir, Limits{MaxFiles: 1}); err == nil || !strings.Contains(err.Error(), "more than 1 files") {
		t.Errorf("ReadDir past MaxFiles: %v", err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "base", "passwd.yaml")); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := ReadDir(dir, Limits{}); !errors.As(err, &e) || e.Reason != Unsafe || !strings.Contains(err.Error(), "passwd.yaml is not a plain file") {
		t.Errorf("ReadDir of a folder with a symlink: %v, want it refused as Unsafe", err)
	}
}
