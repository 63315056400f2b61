package resident

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const sampleSmaps = `00400000-023d5000 r-xp 00000000 fe:00 10002472                           /bin/helm-locker
Size:              32596 kB
Rss:               27176 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
023d5000-049e2000 r--p 01fd5000 fe:00 10002472                           /bin/helm-locker
Rss:               27688 kB
Anonymous:             0 kB
064bf000-064c0000 r--p 060be000 fe:00 10002471                           /bin/helm-locker
Rss:                   4 kB
Anonymous:             4 kB
049e2000-04ace000 rw-p 045e2000 fe:00 10002472                           /bin/helm-locker
Rss:                 752 kB
Anonymous:           188 kB
04ace000-04b00000 rw-p 00000000 00:00 0
Rss:                 100 kB
Anonymous:           100 kB
7f0000000000-7f0000001000 r--p 00000000 fe:00 12                         /bin/helm-locker-other
Rss:                   4 kB
Anonymous:             0 kB
7f0000002000-7f0000003000 r--p 00000000 fe:00 13                         /bin/helm locker
Rss:                   4 kB
Anonymous:             0 kB
`

func TestReadOnlyMappings(t *testing.T) {
	for _, tc := range []struct {
		name, exe string
		want      []mapping
	}{
		{"code and read-only data, not the copied page or the writable data", "/bin/helm-locker", []mapping{
			{start: 0x400000, end: 0x23d5000, resident: 27176 << 10},
			{start: 0x23d5000, end: 0x49e2000, resident: 27688 << 10},
		}},
		{"a path with a space", "/bin/helm locker", []mapping{{start: 0x7f0000002000, end: 0x7f0000003000, resident: 4 << 10}}},
		{"another executable", "/bin/kubectl", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readOnlyMappings([]byte(sampleSmaps), tc.exe)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(mapping{})); diff != "" {
				t.Errorf("readOnlyMappings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrim drops this test binary's pages, and runs on: what it runs next
// is mapped back.
func TestTrim(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	trimmed, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	if trimmed == 0 {
		t.Fatal("Trim dropped nothing from a running test binary")
	}
	data, err := os.ReadFile(smaps)
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	for _, m := range readOnlyMappings(data, exe) {
		after += m.resident
	}
	// Reading smaps touched some code again, but far from all of it.
	if after >= trimmed/2 {
		t.Errorf("%d bytes of the executable resident after Trim, of %d before: want less than half", after, trimmed)
	}
}
