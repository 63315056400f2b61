package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	actionv3 "helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	kubev3 "helm.sh/helm/v3/pkg/kube"
	kubefakev3 "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/release"
	storagev3 "helm.sh/helm/v3/pkg/storage"
	driverv3 "helm.sh/helm/v3/pkg/storage/driver"
	actionv4 "helm.sh/helm/v4/pkg/action"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	kubev4 "helm.sh/helm/v4/pkg/kube"
	kubefakev4 "helm.sh/helm/v4/pkg/kube/fake"
	releaseiv4 "helm.sh/helm/v4/pkg/release"
	releasev4 "helm.sh/helm/v4/pkg/release/v1"
	storagev4 "helm.sh/helm/v4/pkg/storage"
	driverv4 "helm.sh/helm/v4/pkg/storage/driver"
)

// fakeRollback is a release whose latest stored revision is given, and
// whose rollback returns err.
type fakeRollback struct {
	version int
	status  release.Status
	readErr error
	err     error

	rolledBackTo []int
}

func (f *fakeRollback) latest(string) (int, release.Status, error) {
	return f.version, f.status, f.readErr
}

func (f *fakeRollback) rollBack(_ string, version int) error {
	f.rolledBackTo = append(f.rolledBackTo, version)
	return f.err
}

// TestRollBackFailed holds the decision to roll back to what storage
// holds: upgrading revision 3, only a failed revision 4 is rolled back.
func TestRollBackFailed(t *testing.T) {
	upgradeErr := errors.New(`configmaps "demo" is forbidden`)
	readErr := errors.New("secrets is forbidden")
	rollbackErr := errors.New("rollback refused")
	for _, tc := range []struct {
		name             string
		stored           fakeRollback
		wantRolledBackTo []int
		wantMsg          string  // after the upgrade's error
		wantIs           []error // besides the upgrade's error
	}{
		{"nothing stored", fakeRollback{version: 3, status: release.StatusDeployed}, nil, "", nil},
		{"N+1 failed", fakeRollback{version: 4, status: release.StatusFailed}, []int{3}, "; rolled back to revision 3 as revision 5", nil},
		{"N+1 failed, rollback fails", fakeRollback{version: 4, status: release.StatusFailed, err: rollbackErr}, []int{3}, "; rolling back failed too: rollback refused", []error{rollbackErr}},
		{"N+1 still pending", fakeRollback{version: 4, status: release.StatusPendingUpgrade}, nil, "", nil},
		{"N+1 deployed", fakeRollback{version: 4, status: release.StatusDeployed}, nil, "", nil},
		{"a later revision failed", fakeRollback{version: 5, status: release.StatusFailed}, nil, "", nil},
		{"storage unreadable", fakeRollback{readErr: readErr}, nil, "; reading the latest revision to roll back failed too: secrets is forbidden", []error{readErr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := tc.stored
			rel := web()
			rel.Version = 3
			err := rollBackFailed(&stored, rel, upgradeErr)
			if diff := cmp.Diff(tc.wantRolledBackTo, stored.rolledBackTo); diff != "" {
				t.Errorf("revisions rolled back to (-want +got):\n%s", diff)
			}
			if want := upgradeErr.Error() + tc.wantMsg; err == nil || err.Error() != want {
				t.Errorf("rollBackFailed() = %v, want %s", err, want)
			}
			for _, target := range append([]error{upgradeErr}, tc.wantIs...) {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(%v, %v) = false", err, target)
				}
			}
		})
	}
}

// storedRevision is what the tests check of a stored revision.
type storedRevision struct {
	Status      string
	Manifest    string
	ApplyMethod string
}

// TestUpgradeRollsBackFailedRevision runs each SDK's upgrade and rollback
// over Helm's memory storage and fake kube client: the Updates fail as
// told, the upgrade's first, then the rollback's.
func TestUpgradeRollsBackFailedRevision(t *testing.T) {
	forbidden := errors.New(`configmaps "demo" is forbidden`)
	refused := errors.New("rollback refused")
	installed := web().Manifest
	for _, tc := range []struct {
		name       string
		opts       Options
		storeErr   error   // what storing revision 2 returns
		updateErrs []error // what the kube client's Updates return, in order
		wantMsg    string  // after the upgrade's error
		want       map[int]storedRevision
	}{
		{
			name:     "failure before storing N+1",
			storeErr: forbidden,
			want:     map[int]storedRevision{1: {Status: "deployed", Manifest: installed}},
		},
		{
			name:       "failed N+1 rolled back",
			updateErrs: []error{forbidden},
			wantMsg:    "; rolled back to revision 1 as revision 3",
			want: map[int]storedRevision{
				1: {Status: "superseded", Manifest: installed},
				2: {Status: "failed"},
				3: {Status: "deployed", Manifest: installed},
			},
		},
		{
			name:       "rollback fails too",
			updateErrs: []error{forbidden, refused},
			wantMsg:    "; rolling back failed too: rollback refused",
			want: map[int]storedRevision{
				1: {Status: "deployed", Manifest: installed},
				2: {Status: "superseded"},
				3: {Status: "failed", Manifest: installed},
			},
		},
		{
			// Helm keeps the deployed revision and drops the oldest
			// other one, here the failed one.
			name:       "rollback keeps MaxHistory",
			opts:       Options{MaxHistory: 2},
			updateErrs: []error{forbidden},
			wantMsg:    "; rolled back to revision 1 as revision 3",
			want: map[int]storedRevision{
				1: {Status: "superseded", Manifest: installed},
				3: {Status: "deployed", Manifest: installed},
			},
		},
	} {
		// Each SDK, and Helm 4's for each apply method.
		for _, sdk := range []string{"helm3", "ssa", "csa"} {
			t.Run(sdk+"/"+tc.name, func(t *testing.T) {
				updates := &updateErrors{errs: tc.updateErrs}
				var (
					err    error
					stored map[int]storedRevision
				)
				if sdk == "helm3" {
					stored, err = upgradeOverFakesV3(t, tc.opts, tc.storeErr, updates)
				} else {
					stored, err = upgradeOverFakesV4(t, sdk, tc.opts, tc.storeErr, updates)
				}
				if !errors.Is(err, forbidden) {
					t.Fatalf("upgrade returned %v, want the upgrade's error wrapped", err)
				}
				if !strings.HasSuffix(err.Error(), forbidden.Error()+tc.wantMsg) {
					t.Errorf("upgrade returned %q, want it to end with %q", err, forbidden.Error()+tc.wantMsg)
				}
				if left := len(updates.errs); left != 0 {
					t.Errorf("%d of the kube client's Update errors were not returned: it was called fewer times than expected", left)
				}
				wantMethod := ""
				if sdk != "helm3" {
					wantMethod = sdk
				}
				want := map[int]storedRevision{}
				for v, r := range tc.want {
					if r.Manifest == "" {
						r.Manifest = stored[v].Manifest // N+1's, as this SDK rendered it
					}
					r.ApplyMethod = wantMethod
					want[v] = r
				}
				if diff := cmp.Diff(want, stored); diff != "" {
					t.Errorf("stored revisions (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// updateErrors returns errs, one per Update of a fake kube client, in
// order; nil once none are left.
type updateErrors struct {
	errs []error
}

func (u *updateErrors) next() error {
	if len(u.errs) == 0 {
		return nil
	}
	err := u.errs[0]
	u.errs = u.errs[1:]
	return err
}

// kubeV3 is Helm 3's fake kube client, whose Updates fail as told, and
// whose Waits fail: Upgrade and its rollback never wait.
type kubeV3 struct {
	kubefakev3.FailingKubeClient
	updates *updateErrors
}

func (k *kubeV3) Update(original, target kubev3.ResourceList, force bool) (*kubev3.Result, error) {
	if err := k.updates.next(); err != nil {
		return &kubev3.Result{}, err
	}
	return k.FailingKubeClient.Update(original, target, force)
}

type kubeV4 struct {
	kubefakev4.FailingKubeClient
	updates *updateErrors
}

func (k *kubeV4) Update(original, target kubev4.ResourceList, options ...kubev4.ClientUpdateOption) (*kubev4.Result, error) {
	if err := k.updates.next(); err != nil {
		return &kubev4.Result{}, err
	}
	return k.FailingKubeClient.Update(original, target, options...)
}

// refuseCreateV3 is Helm 3's memory storage, refusing new revisions with
// err when it is set.
type refuseCreateV3 struct {
	*driverv3.Memory
	err error
}

func (d refuseCreateV3) Create(key string, rls *release.Release) error {
	if d.err != nil {
		return d.err
	}
	return d.Memory.Create(key, rls)
}

type refuseCreateV4 struct {
	*driverv4.Memory
	err error
}

func (d refuseCreateV4) Create(key string, rls releaseiv4.Releaser) error {
	if d.err != nil {
		return d.err
	}
	return d.Memory.Create(key, rls)
}

// installedWeb is web() as installed: revision 1, deployed, with a chart
// that renders.
func installedWeb() *release.Release {
	rel := web()
	rel.Info = &release.Info{Status: release.StatusDeployed}
	rel.Chart.Templates[0].Data = []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting }}\n")
	return rel
}

func upgradeOverFakesV3(t *testing.T, opts Options, storeErr error, updates *updateErrors) (map[int]storedRevision, error) {
	t.Helper()
	rel := installedWeb()
	mem := driverv3.NewMemory()
	mem.SetNamespace(rel.Namespace)
	if err := mem.Create("sh.helm.release.v1.demo.v1", rel); err != nil {
		t.Fatal(err)
	}
	kube := &kubeV3{updates: updates}
	kube.Out = io.Discard
	kube.WaitError = errors.New("Upgrade waited")
	cfg := &actionv3.Configuration{
		Releases:     storagev3.Init(refuseCreateV3{Memory: mem, err: storeErr}),
		KubeClient:   kube,
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	given := installedWeb()
	_, err := upgradeHelm3(context.Background(), cfg, given, nil, opts)
	history, herr := cfg.Releases.History(rel.Name)
	if herr != nil {
		t.Fatal(herr)
	}
	stored := map[int]storedRevision{}
	for _, r := range history {
		stored[r.Version] = storedRevision{Status: r.Info.Status.String(), Manifest: r.Manifest}
	}
	return stored, err
}

func upgradeOverFakesV4(t *testing.T, method string, opts Options, storeErr error, updates *updateErrors) (map[int]storedRevision, error) {
	t.Helper()
	raw, err := json.Marshal(installedWeb())
	if err != nil {
		t.Fatal(err)
	}
	var rel releasev4.Release
	if err := json.Unmarshal(raw, &rel); err != nil {
		t.Fatal(err)
	}
	rel.ApplyMethod = method
	mem := driverv4.NewMemory()
	mem.SetNamespace(rel.Namespace)
	if err := mem.Create("sh.helm.release.v1.demo.v1", &rel); err != nil {
		t.Fatal(err)
	}
	kube := &kubeV4{updates: updates}
	kube.Out = io.Discard
	cfg := actionv4.NewConfiguration(actionv4.ConfigurationSetLogger(slog.DiscardHandler))
	cfg.Releases = storagev4.Init(refuseCreateV4{Memory: mem, err: storeErr})
	cfg.KubeClient = kube
	cfg.Capabilities = chartcommon.DefaultCapabilities
	_, err = upgradeHelm4(context.Background(), cfg, installedWeb(), nil, method, opts)
	// Helm 4's waiter for hookOnly waits for hooks alone; the fake's
	// waiter would wait for anything, so the strategy asked for is checked.
	if i := slices.IndexFunc(kube.RecordedWaitStrategies, func(s kubev4.WaitStrategy) bool { return s != kubev4.HookOnlyStrategy }); i >= 0 {
		t.Errorf("wait strategies %v; Upgrade and its rollback never wait", kube.RecordedWaitStrategies)
	}
	history, herr := cfg.Releases.History(rel.Name)
	if herr != nil {
		t.Fatal(herr)
	}
	stored := map[int]storedRevision{}
	for _, ri := range history {
		r, ok := ri.(*releasev4.Release)
		if !ok {
			t.Fatalf("Helm 4's storage holds a %T", ri)
		}
		stored[r.Version] = storedRevision{Status: r.Info.Status.String(), Manifest: r.Manifest, ApplyMethod: r.ApplyMethod}
	}
	return stored, err
}
