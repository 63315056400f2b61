package informers

import (
	"encoding/json"
	"os"
	"testing"

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
// changes it.
func TestHeldFingerprint(t *testing.T) {
	base := edited(t, storedDeployment(t), func(*unstructured.Unstructured) {})
	tests := []struct {
		name string
		edit func(u *unstructured.Unstructured)
		same bool
	}{
		{name: "status", same: true, edit: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(3), "status", "readyReplicas")
		}},
		{name: "resourceVersion and managedFields", same: true, edit: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("999")
			m := u.GetManagedFields()
			m[1].Manager = "kube-controller-manager"
			u.SetManagedFields(m)
		}},
		{name: "spec", edit: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "replicas")
		}},
		{name: "a label", edit: func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"team": "x"})
		}},
		{name: "an annotation", edit: func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"note": "x"})
		}},
		{name: "generation", edit: func(u *unstructured.Unstructured) { u.SetGeneration(7) }},
		{name: "uid (deleted and created again)", edit: func(u *unstructured.Unstructured) { u.SetUID("other") }},
		{name: "finalizers", edit: func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"x"}) }},
	}
	want := heldFingerprint(base)
	if want == 0 {
		t.Fatal("no fingerprint for a stored Deployment")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := heldFingerprint(edited(t, base, tt.edit)); (got == want) != tt.same {
				t.Errorf("fingerprint equal = %v, want %v", got == want, tt.same)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"metadata":[1}`, `{"spec":`} {
		if got := heldFingerprint([]byte(bad)); got != 0 {
			t.Errorf("heldFingerprint(%q) = %d, want 0", bad, got)
		}
	}
}

// TestSameObjectIsNotStoredOrTold: a tracked object whose stored stub has
// its fingerprint is decoded to a mark the store ignores: the stub stays,
// and the handler is not called. Any other version is decoded whole.
func TestSameObjectIsNotStoredOrTold(t *testing.T) {
	data := storedDeployment(t)
	fp := heldFingerprint(data)
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

// inLine stands for what a lock's Store keeps of an object that is as
// declared: a type that embeds a Stub (a bare *Stub is an untracked object,
// which the store drops).
type inLine struct{ *Stub }

// BenchmarkTrackedEvent is the decoder's cost of a watch event on a locked
// Deployment: whole, as before, and for a status write the lock need not
// look at.
func BenchmarkTrackedEvent(b *testing.B) {
	data := storedDeployment(b)
	fp := heldFingerprint(data)
	for _, bench := range []struct {
		name      string
		unchanged func(string, string, uint64) bool
	}{
		{"decoded", func(string, string, uint64) bool { return false }},
		{"status-only", func(_, _ string, f uint64) bool { return f == fp }},
	} {
		b.Run(bench.name, func(b *testing.B) {
			d := &objectDecoder{tracked: func(string, string) bool { return true }, unchanged: bench.unchanged}
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, _, err := d.Decode(data, nil, nil); err != nil {
					b.Fatal(err)
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
	r := &Registry{opts: Options{Store: func(_ schema.GroupVersionResource, u *unstructured.Unstructured) metav1.Object {
		return readsStatus{NewStub(u)}
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
	if obj, _, _ := d.Decode(data, nil, nil); obj != nil {
		if w, ok := obj.(*watchStub); ok && w.same {
			t.Error("an object whose status is read was skipped")
		}
	}
}
