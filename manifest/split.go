package manifest

import "strings"

// splitDocuments splits a rendered manifest into its YAML documents, in
// order, exactly as Helm's releaseutil.SplitManifests and
// BySplitManifestsOrder do: a "---" at the start of a line separates
// documents, together with the whitespace on both sides of it. Helm uses a
// regular expression and a map keyed by "manifest-N"; at cold start that
// was a third of the time spent parsing manifests. FuzzSplitDocuments holds
// the two to the same answers.
func splitDocuments(manifest string) []string {
	// Helm splits with the expression (?:^|\s*\n)---\s* over the trimmed
	// manifest. A match starts at the beginning of the text or at the
	// first of the whitespace before a "\n---", and takes the whitespace
	// after the dashes.
	s := strings.TrimSpace(manifest)
	var parts []string
	start, next := 0, 0 // the current part starts at start; the next match at next or later
	if strings.HasPrefix(s, "---") {
		parts = append(parts, "")
		start = skipRE2Space(s, 3)
		next = start
	}
	for {
		i := strings.Index(s[next:], "\n---")
		if i < 0 {
			break
		}
		end := next + i
		for end > next && isRE2Space(s[end-1]) {
			end--
		}
		parts = append(parts, s[start:end])
		start = skipRE2Space(s, next+i+4)
		next = start
	}
	parts = append(parts, s[start:])

	docs := parts[:0]
	for _, p := range parts {
		if p != "" {
			docs = append(docs, strings.TrimSpace(p))
		}
	}
	return docs
}

// isRE2Space reports whether c is in \s as Go's regexp package has it.
func isRE2Space(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

func skipRE2Space(s string, i int) int {
	for i < len(s) && isRE2Space(s[i]) {
		i++
	}
	return i
}
