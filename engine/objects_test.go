package engine

import (
	"hash/maphash"
	"slices"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestLockedObjects(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	refs := []ObjectRef{
		{GVR: deployments, Namespace: "b", Name: "web"},
		{GVR: cmGVR, Namespace: "b", Name: "c"},
		{GVR: cmGVR, Namespace: "a", Name: "z"},
		{GVR: cmGVR, Namespace: "a", Name: "c"},
		{GVR: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Name: "a"},
	}
	var l lockedObjects
	for _, ref := range refs {
		if !l.add(lockedAt(ref)) {
			t.Fatalf("add(%s) = false on its first add", ref)
		}
	}
	if l.add(lockedAt(refs[2])) {
		t.Errorf("add(%s) = true the second time, want false: an object is declared once", refs[2])
	}
	for _, ref := range refs {
		if o := l.get(ref); o == nil || o.ref() != ref {
			t.Errorf("get(%s) = %v", ref, o)
		}
	}
	if o := l.get(ObjectRef{GVR: cmGVR, Namespace: "a", Name: "d"}); o != nil {
		t.Errorf("get of an object never added = %v, want nil", o.ref())
	}
	if !slices.IsSortedFunc(l, func(a, b *lockedObject) int { return compareRefs(a.ref(), b.ref()) }) || len(l) != len(refs) {
		t.Errorf("objects not kept sorted and whole: %v", l)
	}
}

func TestOwners(t *testing.T) {
	ref, other := ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "c"}, ObjectRef{GVR: cmGVR, Namespace: "ns", Name: "d"}
	// An object of another type by the same name is another object.
	sameName := ObjectRef{GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "ns", Name: "c"}
	tests := []struct {
		name string
		set  [][]string // successive owners of ref
		want []string
	}{
		{name: "one owner", set: [][]string{{"a"}}, want: []string{"a"}},
		{name: "several, in order", set: [][]string{{"a"}, {"b", "a", "c"}}, want: []string{"b", "a", "c"}},
		{name: "back to one", set: [][]string{{"a", "b"}, {"b"}}, want: []string{"b"}},
		{name: "none", set: [][]string{{"a", "b"}, nil}, want: nil},
	}
	// Every ref of one hash, as two refs of one hash would be: the
	// engine tells them apart all the same.
	hashes := map[string]func(maphash.Seed, ObjectRef) uint64{
		"":                   hashRef,
		", one hash for all": func(maphash.Seed, ObjectRef) uint64 { return 7 },
	}
	for hashName, hash := range hashes {
		for _, tt := range tests {
			t.Run(tt.name+hashName, func(t *testing.T) {
				e := &Engine{sets: map[string]*objectSet{}, owners: newOwners()}
				e.owners.hash = hash
				for _, key := range []string{"a", "b", "c", "x", "y"} {
					s := &objectSet{key: key}
					for _, r := range []ObjectRef{ref, other, sameName} {
						o := lockedAt(r)
						o.set = s
						s.objects.add(o)
					}
					e.sets[key] = s
				}
				e.setOwnersLocked(other, []string{"x"})
				for _, keys := range tt.set {
					e.setOwnersLocked(ref, keys)
				}
				if diff := cmp.Diff(tt.want, e.owners.keys(ref)); diff != "" {
					t.Errorf("keys (-want +got):\n%s", diff)
				}
				wantHolder := ""
				if len(tt.want) > 0 {
					wantHolder = tt.want[0]
				}
				if got := e.holderLocked(ref); got != wantHolder {
					t.Errorf("holder = %q, want %q", got, wantHolder)
				}
				if h := e.owners.holder(ref); h != nil && h != e.sets[wantHolder].objects.get(ref) {
					t.Errorf("holder's object is %s of set %q, not its holder's", h.ref(), h.set.key)
				}
				if e.owners.has(ref) != (len(tt.want) > 0) {
					t.Errorf("has = %v with owners %v", e.owners.has(ref), tt.want)
				}
				if len(tt.want) < 2 && len(e.owners.rest) != 0 {
					t.Errorf("rest keeps %v for an object of %d owners", e.owners.rest, len(tt.want))
				}
				if got := e.owners.keys(other); !slices.Equal(got, []string{"x"}) {
					t.Errorf("another object's owners became %v", got)
				}
				if e.owners.has(sameName) || e.holderLocked(sameName) != "" {
					t.Errorf("%s, never declared, has holder %q", sameName, e.holderLocked(sameName))
				}
				e.setOwnersLocked(sameName, []string{"y"})
				if got := e.owners.keys(ref); !slices.Equal(got, tt.want) {
					t.Errorf("owners of %s became %v once %s was declared", ref, got, sameName)
				}
				// Each gone in turn, the others keep theirs.
				for i, r := range []ObjectRef{other, ref, sameName} {
					e.setOwnersLocked(r, nil)
					for _, later := range []ObjectRef{other, ref, sameName}[i+1:] {
						if !e.owners.has(later) && (later != ref || len(tt.want) > 0) {
							t.Errorf("%s lost its owners when %s's were taken", later, r)
						}
					}
				}
				if len(e.owners.first)+len(e.owners.collided)+len(e.owners.rest) != 0 {
					t.Errorf("owners keep %d, %d and %d entries once none is owned", len(e.owners.first), len(e.owners.collided), len(e.owners.rest))
				}
			})
		}
	}
}

// TestLockedObjectSize keeps lockedObject, one for every locked object, in
// the size class it was made to fit: the next one up costs 16 bytes an
// object, and the fragmentation a larger class may bring (see
// lockedObject). At 264 bytes it once took the 288-byte class, which it
// shared with the groups of the small maps decoding makes by the million
// at a cold lock, and the spans they shared stayed mostly empty: 134 MiB
// of RSS after a cold lock of 20,000 objects, against 109 at 248 bytes.
// Keep a new field that most objects do not need behind a pointer, with
// those of its kind (declaredExtras, driftState).
func TestLockedObjectSize(t *testing.T) {
	if size := unsafe.Sizeof(lockedObject{}); size > 128 {
		t.Errorf("lockedObject is %d bytes, over the 128-byte size class", size)
	}
}

// lockedAt is a lockedObject of ref and nothing else.
func lockedAt(ref ObjectRef) *lockedObject {
	o := &lockedObject{}
	o.setRef(ref)
	return o
}
