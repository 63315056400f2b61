package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

// outOfOrder lists a Deployment, a Service and a ConfigMap in namespace
// "new" before the Namespace itself, as hand-written manifests do.
func outOfOrder(t *testing.T) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		{Object: obj(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: new}\nspec: {replicas: 1}\n")},
		{Object: obj(t, "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: new}\nspec: {ports: [{port: 80}]}\n")},
		{Object: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: new}\ndata: {k: v}\n")},
		{Object: obj(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: new}\n")},
	}
}

// created lists the kinds of the objects client was asked to create, in
// order.
func created(actions []clienttesting.Action) []string {
	var kinds []string
	for _, a := range actions {
		if c, ok := a.(clienttesting.CreateAction); ok {
			kinds = append(kinds, c.GetObject().(*unstructured.Unstructured).GetKind())
		}
	}
	return kinds
}

// TestCreationOrder: a Sync creates a set's objects in the order kubectl
// and Helm do, whatever order they were declared in, and on every Sync.
func TestCreationOrder(t *testing.T) {
	for i := range 20 {
		e, client, _ := newTestEngine(t)
		e.Declare("k", ObjectSet{Objects: outOfOrder(t)})
		if _, err := e.Sync(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		want := []string{"Namespace", "ConfigMap", "Service", "Deployment"}
		if diff := cmp.Diff(want, created(client.Actions())); diff != "" {
			t.Fatalf("run %d: kinds created, in order (-want +got):\n%s", i, diff)
		}
	}
}

func TestCreationOrderRanks(t *testing.T) {
	order := []schema.GroupKind{
		{Kind: "Namespace"},
		{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"},
		{Kind: "ServiceAccount"},
		{Kind: "ConfigMap"},
		{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
		{Kind: "Service"},
		{Group: "apps", Kind: "Deployment"},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
		{Group: "example.com", Kind: "Widget"},
	}
	for i := 1; i < len(order); i++ {
		if a, b := CreationOrder(order[i-1]), CreationOrder(order[i]); a >= b {
			t.Errorf("CreationOrder(%s) = %d, CreationOrder(%s) = %d; want %s created first", order[i-1], a, order[i], b, order[i-1])
		}
	}
}

// TestWaitingForTheSetsNamespace: while a Namespace the set declares does
// not exist, its objects wait and say so; none is a Failure, and they are
// created once it is. An object in a namespace the set does not declare
// fails as before.
func TestWaitingForTheSetsNamespace(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	namespaces := map[string]bool{}
	nsDown := true
	client.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		c := a.(clienttesting.CreateAction)
		if c.GetResource().Resource == "namespaces" {
			if nsDown {
				return true, nil, apierrors.NewServiceUnavailable("etcd is away")
			}
			namespaces[c.GetObject().(*unstructured.Unstructured).GetName()] = true
			return false, nil, nil
		}
		if ns := c.GetNamespace(); !namespaces[ns] {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, ns)
		}
		return false, nil, nil
	})
	objs := append(outOfOrder(t), &unstructured.Unstructured{Object: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stray, namespace: elsewhere}\n")})
	e.Declare("k", ObjectSet{Objects: objs})

	res, err := e.Sync(ctx, "k")
	if err == nil {
		t.Fatal("Sync with the Namespace's creation failing returned no error")
	}
	ref := func(resource, group string) ObjectRef {
		return ObjectRef{GVR: schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource}, Namespace: "new", Name: "web"}
	}
	wantWaiting := []Waiting{
		{Ref: ref("configmaps", ""), Kind: "ConfigMap", Namespace: "new"},
		{Ref: ref("services", ""), Kind: "Service", Namespace: "new"},
		{Ref: ref("deployments", "apps"), Kind: "Deployment", Namespace: "new"},
	}
	if diff := cmp.Diff(wantWaiting, res.Waiting); diff != "" {
		t.Errorf("Waiting (-want +got):\n%s", diff)
	}
	var failed []string
	for _, f := range res.Failed {
		failed = append(failed, f.Ref.String()+": "+f.Reason)
	}
	if diff := cmp.Diff([]string{"configmaps/elsewhere/stray: NamespaceNotFound"}, failed); diff != "" {
		t.Errorf("Failed (-want +got):\n%s", diff)
	}
	if res.InLine || res.RequeueAfter == 0 || res.RequeueAfter > namespaceWait {
		t.Errorf("InLine %v, RequeueAfter %s; want not in line, and a requeue within %s", res.InLine, res.RequeueAfter, namespaceWait)
	}
	for _, d := range res.Drifts {
		if d.Ref.Namespace == "new" && d.Kind != "Namespace" {
			t.Errorf("a waiting object was reported as a drift: %+v", d)
		}
	}

	nsDown = false
	res, err = e.Sync(ctx, "k")
	var oe *ObjectError
	if err != nil && !(errors.As(err, &oe) && oe.Ref.Namespace == "elsewhere") {
		t.Fatal(err)
	}
	if len(res.Waiting) != 0 || res.Locked != 4 {
		t.Errorf("once the Namespace exists: Waiting %+v, %d of %d locked; want none waiting, and all but the stray ConfigMap locked", res.Waiting, res.Locked, res.Objects)
	}
	if _, err := client.Resource(cmGVR).Namespace("new").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap new/web: %v", err)
	}
}

// TestTypesChangedRetriesWhatIsNotInLine: a CRD event syncs again every
// set with an object still to be brought in line, such as a custom
// resource whose creation failed while its CRD was not yet Established,
// and leaves the sets that are in line alone.
func TestTypesChangedRetriesWhatIsNotInLine(t *testing.T) {
	ctx := context.Background()
	e, client, notified := newTestEngine(t)
	down := true
	client.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if down && a.GetNamespace() == "pending" {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "")
		}
		return false, nil, nil
	})
	declare := func(key, ns string) {
		u := configMap(t, "declared")
		u.SetNamespace(ns)
		e.Declare(key, ObjectSet{Objects: []*unstructured.Unstructured{u}})
		_, _ = e.Sync(ctx, key)
	}
	declare("in-line", "fine")
	declare("pending", "pending")
	*notified = nil
	e.typesChanged()
	if diff := cmp.Diff([]string{"pending"}, *notified); diff != "" {
		t.Errorf("sets notified of a CRD event (-want +got):\n%s", diff)
	}
}

// TestWaitingForTheSetsCRD: creating an object of a kind whose CRD the set
// declares, while the API server does not serve the kind (the CRD was
// deleted and is being recreated) or refuses it because the CRD is still
// terminating, waits and retries within a second instead of failing into
// the caller's backoff or PermanentRetry.
func TestWaitingForTheSetsCRD(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"not served", apierrors.NewNotFound(gr, "")},
		// What apiextensions-apiserver answers from the moment the CRD's
		// finalizer deletes its objects until the CRD is gone.
		{"CRD terminating", apierrors.NewForbidden(gr, "c", errors.New("create not allowed while custom resource definition is terminating"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, client, _ := newTestEngine(t)
			served := false
			client.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
				if !served {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			// A CRD naming the kind; the fake serves no CRDs, so it stays
			// unresolved, which does not hold the rest back.
			crd := &unstructured.Unstructured{Object: obj(t, "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: configmaps.core}\nspec: {group: \"\", names: {kind: ConfigMap, plural: configmaps}}\n")}
			e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{crd, configMap(t, "declared")}, DefaultNamespace: "ns"})
			res, err := e.Sync(ctx, "k")
			if err != nil || len(res.Failed) != 0 || len(res.Drifts) != 0 || res.RequeueAfter == 0 || res.RequeueAfter > namespaceWait || res.InLine {
				t.Fatalf("Sync while the declared CRD's kind cannot be created = %+v, %v; want no error, failure or drift, a requeue within %s", res, err, namespaceWait)
			}
			served = true
			if res, err = e.Sync(ctx, "k"); err != nil || res.Locked != 1 {
				t.Errorf("Sync once the kind is served = %+v, %v; want the object created", res, err)
			}
		})
	}
}

// TestNoCreationWhileItsCRDIsDeleted: a custom resource is not recreated
// while the CRD watch has seen its CRD being deleted, though the API server
// takes the creation (its cache of the CRD lags; see deletedCRDs), and is
// recreated once a CRD serving the type is seen again.
func TestNoCreationWhileItsCRDIsDeleted(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	creates := 0
	client.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		creates++
		return false, nil, nil
	})
	crd := &unstructured.Unstructured{Object: obj(t, "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: configmaps.core}\nspec: {group: \"\", names: {kind: ConfigMap, plural: configmaps}}\n")}
	e.Declare("k", ObjectSet{Objects: []*unstructured.Unstructured{crd, configMap(t, "declared")}, DefaultNamespace: "ns"})
	deleting := crd.DeepCopy()
	deleting.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	e.seenCRD(deleting)
	res, err := e.Sync(ctx, "k")
	if err != nil || creates != 0 || len(res.Failed) != 0 || res.RequeueAfter == 0 || res.RequeueAfter > namespaceWait {
		t.Fatalf("Sync while the CRD is seen being deleted = %+v, %v, %d creations; want none, no failure, a requeue within %s", res, err, creates, namespaceWait)
	}
	e.seenCRD(crd)
	if res, err = e.Sync(ctx, "k"); err != nil || creates != 1 || res.Locked != 1 {
		t.Errorf("Sync once the CRD is seen again = %+v, %v, %d creations; want the object created once", res, err, creates)
	}
}

// TestWatchBackChecksItsType: when a type's informer sees its objects
// again, each object of the type is checked, since one started anew
// reports no deletion it missed; objects of other types are left alone.
func TestWatchBackChecksItsType(t *testing.T) {
	ctx := context.Background()
	e, client, _ := newTestEngine(t)
	e.Declare("k", ObjectSet{Objects: outOfOrder(t)})
	if _, err := e.Sync(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	// The ConfigMap goes while its watch is away; no event says so.
	if err := client.Resource(cmGVR).Namespace("new").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.healthChanged(cmGVR, false)
	if res, _ := e.Sync(ctx, "k"); len(res.Drifts) != 0 {
		t.Fatalf("Sync while the watch is away = %+v; want nothing checked", res)
	}
	e.healthChanged(cmGVR, true)
	res, err := e.Sync(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, d := range res.Drifts {
		checked = append(checked, d.Kind)
	}
	if diff := cmp.Diff([]string{"ConfigMap"}, checked); diff != "" || !res.Drifts[0].Corrected {
		t.Errorf("drifts once the watch is back %+v (-want +got kinds):\n%s", res.Drifts, diff)
	}
}

// TestReadsManagedFieldsOnlyForApplyManagers: the informers decode a
// tracked object's managedFields before store only where store reads
// them, for a set an Apply manager writes (see hasUpdateEntry), and, to
// be safe, for an object no set holds yet.
func TestReadsManagedFieldsOnlyForApplyManagers(t *testing.T) {
	e, _, _ := newTestEngine(t)
	e.Declare("helm3", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("a", "c")}})
	e.Declare("helm4", ObjectSet{Objects: []*unstructured.Unstructured{declaredCM("b", "c")}, ApplyManager: "helm"})
	e.Prepare(context.Background())
	for _, tc := range []struct {
		namespace string
		want      bool
	}{{"a", false}, {"b", true}, {"c", true}} {
		if got := e.readsManagedFields(cmGVR, tc.namespace, "c"); got != tc.want {
			t.Errorf("readsManagedFields(%s/c) = %v, want %v", tc.namespace, got, tc.want)
		}
	}
}
