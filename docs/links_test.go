// Package docs holds the tests of the documentation: README.md at the
// repository's root and the pages beside this file.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// pendingPages are pages the index links before they are written: another
// change adds docs/api-reference.md. A link to one is not reported while
// the file does not exist; once it does, it is checked as any other.
var pendingPages = []string{"api-reference.md"}

// TestRelativeLinksResolve holds every relative link of README.md and of
// docs/*.md to a file that exists and, where it names an anchor, to a
// heading of that page with that slug, as GitHub renders it.
func TestRelativeLinksResolve(t *testing.T) {
	pages := pagesToCheck(t)
	for _, problem := range brokenLinks(pages) {
		t.Error(problem)
	}
}

// TestIndexLinksEveryPage holds docs/README.md to the pages beside it:
// a page the index does not link is a page no reader finds.
func TestIndexLinksEveryPage(t *testing.T) {
	index, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range links(string(index)) {
		path, _, _ := strings.Cut(l.target, "#")
		if isRelative(l.target) && path != "" {
			linked[filepath.Clean(path)] = true
		}
	}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		if page != "README.md" && !linked[page] {
			t.Errorf("docs/README.md does not link docs/%s", page)
		}
	}
}

// TestBrokenLinksAreFound holds the checker itself to what it must
// report, so that a checker that finds nothing cannot pass for a
// documentation without broken links.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("target.md", "# Target page\n\n## The `lock`'s state, again\n\n## Twice\n\n## Twice\n")
	page := write("page.md", strings.Join([]string{
		"# Page",
		"",
		"[fine](target.md) and [fine too](target.md#the-locks-state-again),",
		"[the second Twice](target.md#twice-1), [here](#page) and",
		"[a link whose text",
		"wraps](target.md#twice).",
		"[no such file](missing.md), [no such heading](target.md#nowhere),",
		"[no such heading here](#nowhere), ![no such picture](missing.png).",
		"[pending](api-reference.md), [outside](https://example.com/missing.md).",
		"`[in code](missing-in-code.md)`",
		"",
		"```",
		"[in a fence](missing-in-fence.md)",
		"```",
	}, "\n"))
	got := brokenLinks([]string{page})
	want := []string{
		page + ":7: missing.md: no such file",
		page + ":7: target.md#nowhere: no heading with that slug",
		page + ":8: #nowhere: no heading with that slug",
		page + ":8: missing.png: no such file",
	}
	if !slices.Equal(got, want) {
		t.Errorf("brokenLinks reported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// pagesToCheck are README.md at the repository's root and docs/*.md.
func pagesToCheck(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md found; the test runs in docs/")
	}
	return append([]string{filepath.Join("..", "README.md")}, pages...)
}

// brokenLinks checks every relative link of the pages and says, for each
// broken one, page:line: target: what is wrong.
func brokenLinks(pages []string) []string {
	var problems []string
	slugCache := map[string]map[string]bool{}
	slugsOf := func(page string) (map[string]bool, error) {
		if s, ok := slugCache[page]; ok {
			return s, nil
		}
		text, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		s := slugs(string(text))
		slugCache[page] = s
		return s, nil
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", page, err))
			continue
		}
		for _, l := range links(string(text)) {
			if !isRelative(l.target) {
				continue
			}
			report := func(what string) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", page, l.line, l.target, what))
			}
			path, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if path != "" {
				target = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
				if _, err := os.Stat(target); err != nil {
					if !(os.IsNotExist(err) && slices.Contains(pendingPages, filepath.Base(target))) {
						report("no such file")
					}
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				report("an anchor in a file that is not markdown")
				continue
			}
			headings, err := slugsOf(target)
			if err != nil {
				report(err.Error())
				continue
			}
			if !headings[strings.ToLower(anchor)] {
				report("no heading with that slug")
			}
		}
	}
	return problems
}

// link is one markdown link: its target as written and the line it
// ends on.
type link struct {
	target string
	line   int
}

var (
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title; the text may wrap across lines.
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// referenceDef is a reference definition: [label]: target.
	referenceDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("(`+)[^`](?:.*?[^`])?(`+)")
)

// links are the links of a markdown text outside code blocks and code
// spans.
func links(text string) []link {
	prose := withoutCode(text)
	var out []link
	add := func(end int, target string) {
		out = append(out, link{target: target, line: 1 + strings.Count(prose[:end], "\n")})
	}
	for _, m := range inlineLink.FindAllStringSubmatchIndex(prose, -1) {
		add(m[1], prose[m[4]:m[5]])
	}
	for _, m := range referenceDef.FindAllStringSubmatchIndex(prose, -1) {
		add(m[1], prose[m[2]:m[3]])
	}
	slices.SortStableFunc(out, func(a, b link) int { return a.line - b.line })
	return out
}

// withoutCode blanks fenced code blocks and code spans, keeping every
// newline so that line numbers still count.
func withoutCode(text string) string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " \t")
		if fence == "" {
			if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
				fence = trimmed[:3]
				lines[i] = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) {
			fence = ""
		}
		lines[i] = ""
	}
	prose := strings.Join(lines, "\n")
	return codeSpan.ReplaceAllStringFunc(prose, func(code string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, code)
	})
}

// isRelative reports whether a link target is a path in this repository
// (or an anchor of the same page) rather than a URL.
func isRelative(target string) bool {
	if strings.HasPrefix(target, "//") {
		return false
	}
	scheme, _, found := strings.Cut(target, ":")
	return !found || strings.ContainsAny(scheme, "/#.")
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// slugs are the anchors a page has: its headings' slugs as GitHub makes
// them (a repeated one gets -1, -2...), and HTML anchors.
func slugs(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(withoutFences(text), "\n") {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// withoutFences blanks fenced code blocks alone: a "#" line in a shell
// block is a comment, not a heading, but a heading keeps its code spans.
func withoutFences(text string) string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// slug is GitHub's anchor for a heading: the rendered text, lower-cased,
// without punctuation but for hyphens and underscores, spaces made
// hyphens.
func slug(heading string) string {
	heading = linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
