package artifact

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// Files are an artifact's files by slash-separated path, cleaned and
// relative to its root. Folders are implied by the paths.
type Files map[string][]byte

// Paths are the files' paths, sorted.
func (f Files) Paths() []string {
	out := make([]string, 0, len(f))
	for p := range f {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Unpack reads a tar.gz into memory. A symlink, a hard link, a device or
// any entry other than a file or folder, and a path that is absolute or
// leaves the root, refuse it whole; so do more files or bytes than limits
// allow.
func Unpack(r io.Reader, limits Limits) (Files, error) {
	limits = limits.withDefaults()
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, &Error{Reason: Unreadable, Message: "not a gzip stream: " + err.Error()}
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	files := Files{}
	var total int64
	// entries counts folders too: a stream of empty folders costs no
	// bytes unpacked, and would otherwise be read without end.
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, &Error{Reason: Unreadable, Message: "not a tar archive: " + err.Error()}
		}
		if entries++; entries > limits.MaxFiles {
			return nil, &Error{Reason: TooLarge, Message: fmt.Sprintf("more than %d files", limits.MaxFiles)}
		}
		name, err := entryPath(hdr.Name)
		if err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, &Error{Reason: Unsafe, Message: fmt.Sprintf("%s is a link to %s: an artifact may hold only files and folders", hdr.Name, hdr.Linkname)}
		default:
			return nil, &Error{Reason: Unsafe, Message: fmt.Sprintf("%s is of tar type %q: an artifact may hold only files and folders", hdr.Name, hdr.Typeflag)}
		}
		if name == "" {
			return nil, &Error{Reason: Unsafe, Message: fmt.Sprintf("%q names the artifact's root as a file", hdr.Name)}
		}
		if hdr.Size > limits.MaxUnpacked-total {
			return nil, &Error{Reason: TooLarge, Message: fmt.Sprintf("more than %d bytes unpacked", limits.MaxUnpacked)}
		}
		// hdr.Size is what tar says; the copy is capped by it, and
		// whatever the stream really holds past it is not read.
		data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
		if err != nil {
			return nil, &Error{Reason: Unreadable, Message: fmt.Sprintf("reading %s: %v", hdr.Name, err)}
		}
		total += int64(len(data))
		if _, dup := files[name]; dup {
			return nil, &Error{Reason: Unsafe, Message: fmt.Sprintf("%s is in the artifact twice", name)}
		}
		files[name] = data
	}
}

// entryPath is a tar entry's name as a clean path relative to the
// artifact's root ("" for the root itself), or an error when it is
// absolute or climbs out.
func entryPath(name string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(strings.ReplaceAll(name, `\`, "/"), "./"))
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", &Error{Reason: Unsafe, Message: fmt.Sprintf("%s leaves the artifact's folder", name)}
	}
	if clean == "." {
		return "", nil
	}
	return clean, nil
}
