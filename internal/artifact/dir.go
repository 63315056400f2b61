package artifact

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ReadDir reads a folder of the local disk as Unpack reads an artifact,
// with the same refusals and caps, so that the CLI builds a folder as the
// locker would build it from a source: a symlink or another special file
// refuses it. A .git folder is left out, as source-controller leaves it
// out of an artifact.
func ReadDir(root string, limits Limits) (Files, error) {
	limits = limits.withDefaults()
	files := Files{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && d.Name() == ".git":
			// A checkout's history, which no source's artifact holds.
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return &Error{Reason: Unsafe, Message: fmt.Sprintf("%s is not a plain file (%s): a lock builds only files and folders", p, d.Type())}
		case len(files) >= limits.MaxFiles:
			return &Error{Reason: TooLarge, Message: fmt.Sprintf("%s holds more than %d files", root, limits.MaxFiles)}
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if total += int64(len(data)); total > limits.MaxUnpacked {
			return &Error{Reason: TooLarge, Message: fmt.Sprintf("%s holds more than %d bytes", root, limits.MaxUnpacked)}
		}
		files[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}
