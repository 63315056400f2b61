package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/helm-locker/helm-locker/e2e/controlplane"
)

// TestTrustTableNamesItsTests holds docs/trust.md's trust table to the tests
// that show each row: every row names at least one, and every test it
// names exists, so that a row cannot lose its proof to a rename.
func TestTrustTableNamesItsTests(t *testing.T) {
	t.Parallel()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "docs", "trust.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, found := strings.Cut(string(readme), "Who may do what; each row names the tests that hold it:\n")
	if !found {
		t.Fatal("docs/trust.md has no trust table")
	}
	table = strings.TrimLeft(table, "\n")
	defined := testFuncs(t, root)
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	rows := 0
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if strings.HasPrefix(line, "| who ") || strings.HasPrefix(line, "|---") {
			continue
		}
		rows++
		who, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		tests := named.FindAllStringSubmatch(line, -1)
		if len(tests) == 0 {
			t.Errorf("the trust table's row %q names no test", who)
		}
		for _, m := range tests {
			if !defined[m[1]] {
				t.Errorf("the trust table's row %q names %s, which no _test.go defines", who, m[1])
			}
		}
	}
	if rows < 7 {
		t.Errorf("the trust table has %d rows; want at least the 7 it had when this test was written", rows)
	}
}

// testFuncs are the names of the Test functions the repository's tests
// define.
func testFuncs(t *testing.T, root string) map[string]bool {
	t.Helper()
	def := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)
	funcs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}
