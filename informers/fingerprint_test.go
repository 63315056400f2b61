package informers

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// storedDeployment is a Deployment of the chart `helm create` makes, as
// kube-apiserver v1.36 stored it after a Helm 4 install and a status
// write, managedFields and all, in the compact JSON of a watch stream.
func storedDeployment(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// edited is data with edit applied to its decoded form, encoded again as
// the API server would (encoding/json keeps map keys sorted, as it does).
func edited(t testing.TB, data []byte, edit func(u *unstructured.Unstructured)) []byte {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	edit(u)
	out, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHeldFingerprint: what another controller writes on every status
// update leaves the fingerprint as it was; anything a lock may hold
// changes it. With HeldMetadata, labels and annotations it does not name
// are not held either.
func TestHeldFingerprint(t *testing.T) {
	base := edited(t, storedDeployment(t), func(*unstructured.Unstructured) {})
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(base); err != nil {
		t.Fatal(err)
	}
	var declared []string
	for k := range u.GetLabels() {
		declared = append(declared, k)
	}
	if len(declared) < 3 {
		t.Fatalf("the stored Deployment has labels %v, want a chart's", u.GetLabels())
	}
	held := NewHeldMetadata(declared, []string{"checksum/config"})
	tests := []struct {
		name string
		edit func(u *unstructured.Unstructured)
		// same and sameHeld: whether the fingerprint stays, taken
		// without HeldMetadata and with it.
		same, sameHeld bool
	}{
		{name: "status", same: true, sameHeld: true, edit: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(3), "status", "readyReplicas")
		}},
		{name: "resourceVersion and managedFields", same: true, sameHeld: true, edit: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("999")
			m := u.GetManagedFields()
			m[1].Manager = "kube-controller-manager"
			u.SetManagedFields(m)
		}},
		{name: "spec", edit: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicas")
		}},
		{name: "a label added", sameHeld: true, edit: func(u *unstructured.Unstructured) {
			u.SetLabels(with(u.GetLabels(), "team", "x"))
		}},
		{name: "an annotation added", sameHeld: true, edit: func(u *unstructured.Unstructured) {
			u.SetAnnotations(with(u.GetAnnotations(), "note", "x"))
		}},
		{name: "a held label changed", edit: func(u *unstructured.Unstructured) {
			u.SetLabels(with(u.GetLabels(), declared[0], "other"))
		}},
		{name: "a held label removed", edit: func(u *unstructured.Unstructured) {
			l := u.GetLabels()
			delete(l, declared[1])
			u.SetLabels(l)
		}},
		{name: "every label replaced", edit: func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"team": "x"})
		}},
		{name: "labels removed", edit: func(u *unstructured.Unstructured) { u.SetLabels(nil) }},
		{name: "a held annotation added", edit: func(u *unstructured.Unstructured) {
			u.SetAnnotations(with(u.GetAnnotations(), "checksum/config", "abc"))
		}},
		{name: "generation", edit: func(u *unstructured.Unstructured) { u.SetGeneration(7) }},
		{name: "uid (deleted and created again)", edit: func(u *unstructured.Unstructured) { u.SetUID("other") }},
		{name: "finalizers", edit: func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"x"}) }},
	}
	want, wantHeld := heldFingerprint(base, nil), heldFingerprint(base, &held)
	if want == 0 || wantHeld == 0 {
		t.Fatal("no fingerprint for a stored Deployment")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := edited(t, base, tt.edit)
			if got := heldFingerprint(data, nil); (got == want) != tt.same {
				t.Errorf("without HeldMetadata: fingerprint equal = %v, want %v", got == want, tt.same)
			}
			if got := heldFingerprint(data, &held); (got == wantHeld) != tt.sameHeld {
				t.Errorf("with HeldMetadata: fingerprint equal = %v, want %v", got == wantHeld, tt.sameHeld)
			}
		})
	}
	// A fingerprint taken by other keys never matches: the keys a stub
	// was judged by are part of it.
	fewer := NewHeldMetadata(declared[1:], nil)
	if heldFingerprint(base, &fewer) == wantHeld || want == wantHeld {
		t.Error("fingerprints taken with other HeldMetadata match")
	}
	for _, bad := range []string{``, `[]`, `{"metadata":[1}`, `{"spec":`} {
		for _, h := range []*HeldMetadata{nil, &held} {
			if got := heldFingerprint([]byte(bad), h); got != 0 {
				t.Errorf("heldFingerprint(%q, %v) = %d, want 0", bad, h, got)
			}
		}
	}
	if got := heldFingerprint([]byte(`{"metadata":{"labels":[1,2]}}`), &held); got != 0 {
		t.Errorf("labels that are not an object, with HeldMetadata: fingerprint %d, want 0", got)
	}
	// Escapes in a key are legal JSON that no held key is written as.
	if escaped := []byte(`{"metadata":{"labels":{"te\u0061m":"x"}}}`); heldFingerprint(escaped, &held) != 0 || heldFingerprint(escaped, nil) == 0 {
		t.Error("a label key with escapes: want 0 with HeldMetadata, and a fingerprint without")
	}
}

// with is m, copied, with key set to value.
func with(m map[string]string, key, value string) map[string]string {
	out := map[string]string{key: value}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// TestSameObjectIsNotStoredOrTold: a tracked object whose stored stub has
// its fingerprint is decoded to a mark the store ignores: the stub stays,
// and the handler is not called. Any other version is decoded whole.
func TestSameObjectIsNotStoredOrTold(t *testing.T) {
	data := storedDeployment(t)
	fp := heldFingerprint(data, nil)
	var stored uint64
	d := &objectDecoder{
		tracked:   func(string, string) bool { return true },
		unchanged: func(_, _ string, f uint64) bool { return f == stored },
	}
	obj, _, err := d.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := obj.(*fingerprinted)
	if !ok || f.fingerprint != fp || f.GetName() != "web-fpchart" {
		t.Fatalf("first decode = %T, want the object whole with its fingerprint", obj)
	}

	told := 0
	s := newTrackingStore(cmGVR, (&Registry{opts: Options{Store: func(_ schema.GroupVersionResource, u *unstructured.Unstructured) metav1.Object {
		return inLine{NewStub(u)}
	}}}).strip,
		func(schema.GroupVersionResource, any) { told++ })
	if err := s.Update(obj); err != nil {
		t.Fatal(err)
	}
	kept, _, _ := s.GetByKey("default/web-fpchart")
	if st, ok := kept.(stubbed); !ok || st.stub().fingerprint != fp {
		t.Fatalf("stored %T, want a stub with the fingerprint", kept)
	}
	stored = fp
	status := edited(t, data, func(u *unstructured.Unstructured) {
		u.SetResourceVersion("1000")
		_ = unstructured.SetNestedField(u.Object, int64(0), "status", "readyReplicas")
	})
	obj, _, err = d.Decode(status, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := obj.(*watchStub); !ok || !w.same {
		t.Fatalf("a status write decodes to %T, want the same-object mark", obj)
	}
	if err := s.Update(obj); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := s.GetByKey("default/web-fpchart"); again != kept || told != 1 {
		t.Errorf("after a status write: stored %p (was %p), handler told %d times; want the stub kept and 1", again, kept, told)
	}
	spec := edited(t, data, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(9), "spec", "replicas")
	})
	if obj, _, _ := d.Decode(spec, nil, nil); obj == nil {
		t.Fatal("no object")
	} else if _, ok := obj.(*fingerprinted); !ok {
		t.Errorf("a spec change decodes to %T, want the object whole", obj)
	}
}

// TestOtherLabelIsSkipped: with HeldMetadata, a label another controller
// adds to a tracked object is skipped as a status write is; a held one
// changed is decoded whole.
func TestOtherLabelIsSkipped(t *testing.T) {
	data := storedDeployment(t)
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	held := NewHeldMetadata(slices.Collect(maps.Keys(u.GetLabels())), nil)
	d := &objectDecoder{
		tracked: func(string, string) bool { return true },
		held:    func(string, string) *HeldMetadata { return &held },
	}
	storeOnce(t, d, data, func(s *Stub) metav1.Object { return inLine{s} })
	for _, tt := range []struct {
		name    string
		edit    func(u *unstructured.Unstructured)
		skipped bool
	}{
		{"a label of another controller", func(u *unstructured.Unstructured) {
			u.SetLabels(with(u.GetLabels(), "team", "x"))
		}, true},
		{"an annotation of another controller", func(u *unstructured.Unstructured) {
			u.SetAnnotations(with(u.GetAnnotations(), "deployment.kubernetes.io/revision", "2"))
		}, true},
		{"a held label", func(u *unstructured.Unstructured) {
			u.SetLabels(with(u.GetLabels(), "app.kubernetes.io/name", "other"))
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obj, _, err := d.Decode(edited(t, data, tt.edit), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := obj.(*watchStub)
			if skipped := ok && w.same; skipped != tt.skipped {
				t.Errorf("decoded to %T, skipped = %v; want %v", obj, skipped, tt.skipped)
			}
		})
	}
}

// storeOnce gives d a store whose Store keeps stand(stub) of an object,
// and stores data's object in it through d.
func storeOnce(t *testing.T, d *objectDecoder, data []byte, stand func(*Stub) metav1.Object) {
	t.Helper()
	r := &Registry{opts: Options{Store: func(_ schema.GroupVersionResource, u *unstructured.Unstructured) metav1.Object {
		return stand(NewStub(u))
	}}}
	s := newTrackingStore(cmGVR, r.strip, nil)
	d.unchanged = unchanged(s)
	obj, _, err := d.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(obj); err != nil {
		t.Fatal(err)
	}
}

// inLine stands for what a lock's Store keeps of an object that is as
// declared: a type that embeds a Stub (a bare *Stub is an untracked object,
// which the store drops).
type inLine struct{ *Stub }

// BenchmarkTrackedEvent is the decoder's cost of a watch event on a locked
// Deployment: whole, as before, and for a status write the lock need not
// look at.
func BenchmarkTrackedEvent(b *testing.B) {
	data := storedDeployment(b)
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		b.Fatal(err)
	}
	held := NewHeldMetadata(slices.Collect(maps.Keys(u.GetLabels())), nil)
	// The label event is data with a label of another controller.
	labelled := edited(b, data, func(u *unstructured.Unstructured) { u.SetLabels(with(u.GetLabels(), "team", "x")) })
	fp, fpHeld := heldFingerprint(data, nil), heldFingerprint(data, &held)
	for _, bench := range []struct {
		name      string
		event     []byte
		held      func(string, string) *HeldMetadata
		unchanged func(string, string, uint64) bool
	}{
		{"decoded", data, nil, func(string, string, uint64) bool { return false }},
		{"status-only", data, nil, func(_, _ string, f uint64) bool { return f == fp }},
		{"other-label", labelled, func(string, string) *HeldMetadata { return &held }, func(_, _ string, f uint64) bool { return f == fpHeld }},
	} {
		b.Run(bench.name, func(b *testing.B) {
			data := bench.event
			d := &objectDecoder{tracked: func(string, string) bool { return true }, held: bench.held, unchanged: bench.unchanged}
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				obj, _, err := d.Decode(data, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				if w, ok := obj.(*watchStub); ok != (bench.name != "decoded") || (ok && !w.same) {
					b.Fatalf("decoded to %T", obj)
				}
			}
		})
	}
}

// readsStatus is a Store's stub for an object whose status its caller
// reads.
type readsStatus struct{ *Stub }

func (readsStatus) ReadsStatus() bool { return true }

// TestStatusReaderSeesStatus: an object stored as a StatusReader gets no
// fingerprint, so its status-only changes are told like any other.
func TestStatusReaderSeesStatus(t *testing.T) {
	data := storedDeployment(t)
	d := &objectDecoder{tracked: func(string, string) bool { return true }}
	storeOnce(t, d, data, func(s *Stub) metav1.Object { return readsStatus{s} })
	if obj, _, _ := d.Decode(data, nil, nil); obj != nil {
		if w, ok := obj.(*watchStub); ok && w.same {
			t.Error("an object whose status is read was skipped")
		}
	}
}

// TestManagedFieldsDeferred: with ReadsManagedFields saying no, Store gets
// a tracked object without its managedFields; kept whole, it is stored
// with them, as the API server sent them; kept as a stand-in, it is
// stored without. Saying yes, Store gets them.
func TestManagedFieldsDeferred(t *testing.T) {
	data := storedDeployment(t)
	whole := &unstructured.Unstructured{}
	if err := whole.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	if len(whole.GetManagedFields()) == 0 {
		t.Fatal("the fixture has no managedFields")
	}
	for _, tc := range []struct {
		name         string
		reads, stub  bool
		wantSeen     bool
		wantInStored bool
	}{
		{"kept whole", false, false, false, true},
		{"kept as a stub", false, true, false, false},
		{"read by Store", true, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &objectDecoder{
				tracked:            func(string, string) bool { return true },
				readsManagedFields: func(string, string) bool { return tc.reads },
			}
			obj, _, err := d.Decode(data, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var seen bool
			s := newTrackingStore(cmGVR, (&Registry{opts: Options{Store: func(_ schema.GroupVersionResource, u *unstructured.Unstructured) metav1.Object {
				seen = len(u.GetManagedFields()) > 0
				if tc.stub {
					return inLine{NewStub(u)}
				}
				return u
			}}}).strip, nil)
			if err := s.Update(obj); err != nil {
				t.Fatal(err)
			}
			if seen != tc.wantSeen {
				t.Errorf("Store saw managedFields: %v, want %v", seen, tc.wantSeen)
			}
			kept, _, _ := s.GetByKey("default/web-fpchart")
			u, isWhole := kept.(*unstructured.Unstructured)
			if isWhole != !tc.stub {
				t.Fatalf("stored %T", kept)
			}
			if !isWhole {
				return
			}
			if diff := cmp.Diff(whole.Object, u.Object); tc.wantInStored && diff != "" {
				t.Errorf("stored object (-decoded whole +stored):\n%s", diff)
			}
		})
	}
}
