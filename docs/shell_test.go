package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runBy is the comment by which a page says that a test runs its sh
// blocks, but those marked "not run".
var runBy = regexp.MustCompile(`<!-- Every sh block below is run, as written, by (Test\w+) \(([\w/.]+)\)`)

// notRun marks a block that no test runs, and says why.
var notRun = regexp.MustCompile(`^<!-- not run: \S.* -->$`)

// TestShellBlocksRunOrMarked: every sh block of README.md and
// docs/getting-started.md is run by a test, which the page names and
// which exists, or is marked "not run" with why.
func TestShellBlocksRunOrMarked(t *testing.T) {
	for _, page := range []string{"../README.md", "getting-started.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		runner := ""
		if m := runBy.FindSubmatch(text); m != nil {
			src, err := os.ReadFile(filepath.Join("..", string(m[2])))
			if err != nil || !strings.Contains(string(src), "func "+string(m[1])+"(") {
				t.Errorf("%s names %s in %s, which does not define it", page, m[1], m[2])
			}
			runner = string(m[1])
		}
		for _, problem := range unmarkedShellBlocks(string(text), runner != "") {
			t.Errorf("%s: %s", page, problem)
		}
	}
}

// unmarkedShellBlocks lists the sh blocks of a page that nothing runs: not
// marked "not run: why", on a page no test runs.
func unmarkedShellBlocks(page string, run bool) []string {
	var problems []string
	lines := strings.Split(page, "\n")
	inBlock := false
	for i, line := range lines {
		switch {
		case inBlock && line == "```":
			inBlock = false
		case !inBlock && strings.HasPrefix(line, "```"):
			inBlock = true
			if line != "```sh" {
				continue
			}
			marked := i > 0 && notRun.MatchString(lines[i-1])
			if !marked && !run {
				problems = append(problems, fmt.Sprintf("the sh block at line %d is run by no test and not marked \"not run\" with why", i+1))
			}
		}
	}
	return problems
}

// TestUnmarkedShellBlocksFound: the check finds a block nothing runs, and
// takes a marked one or one on a page a test runs.
func TestUnmarkedShellBlocksFound(t *testing.T) {
	page := "text\n\n```sh\nmake x\n```\n\n<!-- not run: why -->\n```sh\nmake y\n```\n\n```yaml\na: b\n```\n"
	if got := unmarkedShellBlocks(page, false); len(got) != 1 || !strings.Contains(got[0], "line 3") {
		t.Errorf("unmarked blocks on a page no test runs = %v, want the one at line 3", got)
	}
	if got := unmarkedShellBlocks(page, true); len(got) != 0 {
		t.Errorf("unmarked blocks on a page a test runs = %v, want none", got)
	}
}
