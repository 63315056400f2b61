package resident

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// smaps lists the process's mappings, each with the counts of its pages.
const smaps = "/proc/self/smaps"

// Trim unmaps from this process the pages of its executable's read-only
// mappings (code, read-only data, the function tables), and keeps the
// kernel from mapping them back 2 MiB at a time. It returns how many
// bytes of those mappings were resident before.
//
// A mapping holding a page of its own (a copy-on-write page, such as the
// relocations written before the mapping was made read-only) is left
// alone: dropping it would lose what was written.
func Trim() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("reading the executable's path: %w", err)
	}
	data, err := os.ReadFile(smaps)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", smaps, err)
	}
	var trimmed int64
	for _, m := range readOnlyMappings(data, exe) {
		// MADV_NOHUGEPAGE first, so that a page touched again is mapped
		// alone and not with its whole folio.
		for _, advice := range []int{unix.MADV_NOHUGEPAGE, unix.MADV_DONTNEED} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, uintptr(advice)); errno != 0 {
				return trimmed, fmt.Errorf("madvise %#x-%#x of %s: %w", m.start, m.end, exe, errno)
			}
		}
		trimmed += m.resident
	}
	return trimmed, nil
}

// mapping is one of the executable's mappings that Trim may drop.
type mapping struct {
	start, end uintptr
	// resident is the bytes of it in the resident set.
	resident int64
}

// readOnlyMappings returns the mappings of exe in an smaps listing that
// are neither writable nor hold an anonymous (copied) page.
func readOnlyMappings(smaps []byte, exe string) []mapping {
	var (
		out     []mapping
		current *mapping
		anon    bool
	)
	flush := func() {
		if current != nil && !anon {
			out = append(out, *current)
		}
		current, anon = nil, false
	}
	scanner := bufio.NewScanner(bytes.NewReader(smaps))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 0 {
			continue
		}
		if key, ok := strings.CutSuffix(fields[0], ":"); ok {
			if current == nil || len(fields) < 2 {
				continue
			}
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				continue
			}
			switch key {
			case "Rss":
				current.resident = kb << 10
			case "Anonymous":
				anon = anon || kb > 0
			}
			continue
		}
		// A mapping's first line: start-end perms offset dev inode [path].
		flush()
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe || strings.ContainsRune(fields[1], 'w') {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		current = &mapping{start: uintptr(s), end: uintptr(e)}
	}
	flush()
	return out
}
