package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/helm-locker/helm-locker/api/v1alpha1"
	"github.com/helm-locker/helm-locker/e2e/framework"
)

// forgeRelease writes, as client, revision `to` of release in ns, marked
// deployed: revision from's stored release, changed by edit, encoded as
// Helm's Secret driver writes it, under the name and labels Helm gives
// revision `to`.
func forgeRelease(t *testing.T, client kubernetes.Interface, ns, release string, from, to int, edit func(rel map[string]any)) string {
	t.Helper()
	old, err := client.CoreV1().Secrets(ns).Get(t.Context(), fmt.Sprintf("sh.helm.release.v1.%s.v%d", release, from), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rel := decodeRelease(t, old.Data["release"])
	rel["version"] = to
	rel["info"].(map[string]any)["status"] = "deployed"
	edit(rel)
	return plantRevision(t, client, ns, release, to, encodeRelease(t, rel))
}

// plantRevision creates, as client, the Secret of revision `to` of release
// in ns, marked deployed, holding data as its release.
func plantRevision(t *testing.T, client kubernetes.Interface, ns, release string, to int, data []byte) string {
	t.Helper()
	name := fmt.Sprintf("sh.helm.release.v1.%s.v%d", release, to)
	if _, err := client.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"owner": "helm", "name": release, "status": "deployed", "version": strconv.Itoa(to)}},
		Type:       "helm.sh/release.v1",
		Data:       map[string][]byte{"release": data},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("forging Secret %s/%s: %v", ns, name, err)
	}
	return name
}

// waitInvalid waits until the CR says, as Ready=False/InvalidRelease,
// that the latest revision, revision, is not one Helm wrote, naming the
// Secret and what is wrong, while the lock still holds the last verified
// revision, 1: anyone who may write Secrets can plant an invalid one, and
// it must not open the lock.
func waitInvalid(t *testing.T, registration, cr string, revision int, secret, problem string) {
	t.Helper()
	env.Eventually(t, 30*time.Second, func() error {
		hr := env.HelmReleaseIn(t, registration, cr)
		locked, ready := findCondition(hr, v1alpha1.ConditionLocked), findCondition(hr, v1alpha1.ConditionReady)
		if hr.Status.Version != 1 || locked == nil || locked.Status != metav1.ConditionTrue || ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonInvalidRelease {
			return fmt.Errorf("revision %d, Locked %+v, Ready %+v; want revision 1 held, Ready=False/InvalidRelease", hr.Status.Version, locked, ready)
		}
		if want := fmt.Sprintf("the latest revision, %d, is not one Helm wrote", revision); !strings.Contains(ready.Message, want) || !strings.Contains(ready.Message, secret) || !strings.Contains(ready.Message, problem) {
			return fmt.Errorf("Ready says %q; want it to say %q, name Secret %s and say %q", ready.Message, want, secret, problem)
		}
		return nil
	})
}

// TestForgedReleaseIdentity: a tenant who may only write Secrets in a
// release's namespace writes a new revision with the verified manifest,
// under the release's Secret name and labels, whose release JSON names
// another namespace or another release. Neither is ever held: nothing is
// created in the other namespace, and the other release's objects are
// neither held against its admin's edit nor recreated after `helm
// uninstall`.
func TestForgedReleaseIdentity(t *testing.T) {
	t.Parallel()
	t.Run("namespace", func(t *testing.T) {
		t.Parallel()
		ns, other := env.Namespace(t), env.Namespace(t)
		forger := tenant(t, ns, "tenant")
		cr := lockGuarded(t, framework.Helm3, ns)
		secret := forgeRelease(t, forger, ns, "app", 1, 2, func(rel map[string]any) { rel["namespace"] = other })
		waitInvalid(t, framework.RegistrationNamespace, cr, 2, ns+"/"+secret, "holds revision 2 of release "+other+"/app")
		absent(t, [4]string{"v1", "configmaps", other, "app-config"})
	})
	t.Run("name", func(t *testing.T) {
		t.Parallel()
		ns := env.Namespace(t)
		forger := tenant(t, ns, "tenant")
		cr := lockGuarded(t, framework.Helm4, ns)
		env.Helm(t, framework.Helm4, "install", "victim", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=1")
		victim, err := env.Kube.CoreV1().Secrets(ns).Get(t.Context(), "sh.helm.release.v1.victim.v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		manifest := decodeRelease(t, victim.Data["release"])["manifest"]
		secret := forgeRelease(t, forger, ns, "app", 1, 2, func(rel map[string]any) {
			rel["name"], rel["manifest"] = "victim", manifest
		})
		waitInvalid(t, framework.RegistrationNamespace, cr, 2, ns+"/"+secret, "holds revision 2 of release "+ns+"/victim")

		// The admin's edit of the other release's object stands.
		setKey(t, ns, "victim-0", "admin's")
		env.Consistently(t, 2*time.Second, func() error {
			if got, _ := keyOf(t, ns, "victim-0"); got != "admin's" {
				return fmt.Errorf("ConfigMap %s/victim-0 data.key = %q: the admin's edit of a release no lock holds was undone", ns, got)
			}
			return nil
		})
		env.Helm(t, framework.Helm4, "uninstall", "victim", "-n", ns)
		absent(t, [4]string{"v1", "configmaps", ns, "victim-0"})
	})
}

// gzipBomb is a release of ns/release at revision that inflates to more
// than inflated bytes, its manifest padded with spaces, as Helm's Secret
// driver would store it: about a thousandth of that.
func gzipBomb(t *testing.T, ns, release string, revision, inflated int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := json.Marshal(map[string]any{"name": release, "namespace": ns, "version": revision, "info": map[string]any{"status": "deployed"}})
	w := bufio.NewWriterSize(zw, 1<<20)
	_, _ = w.Write(head[:len(head)-1])
	_, _ = w.WriteString(`,"manifest":"`)
	spaces := bytes.Repeat([]byte(" "), 1<<20)
	for n := 0; n < inflated; n += len(spaces) {
		_, _ = w.Write(spaces)
	}
	_, _ = w.WriteString(`"}`)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// peakRSS is the most memory the process pid has held: its VmHWM.
func peakRSS(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// maxLockerRSS bounds a small locker's memory in these tests, attack and
// all: an e2e locker holding a few releases peaks at about 60 MiB.
const maxLockerRSS = 200 << 20

// TestGzipBombRelease: a tenant who may only write Secrets writes a
// revision of a locked release that inflates to 700 MiB, then one whose
// gzip trailer claims 32 MiB. The locker refuses both as InvalidRelease,
// naming the Secret: the first without inflating it, the second once it
// inflates past its trailer. It stays up, its memory grows by no more than
// one release at the bound, and it still reverts the release next to it.
func TestGzipBombRelease(t *testing.T) {
	t.Parallel()
	ns, neighbour, registration := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	forger := tenant(t, ns, "tenant")
	locker, err := env.StartLocker("bomb-locker", "--namespace", registration, "--controller-name", "bomb-locker", "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=1")
	env.Helm(t, framework.Helm3, "install", "next", framework.Chart(t, "configmaps"), "-n", neighbour, "--set", "count=1")
	cr := env.RegisterIn(t, registration, ns, "app")
	next := env.RegisterIn(t, registration, neighbour, "next")
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	env.WaitForStateIn(t, registration, next, v1alpha1.StateDeployed, 1)
	before := peakRSS(t, locker.PID())

	bomb := gzipBomb(t, ns, "app", 2, 700<<20)
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb takes %d bytes; a Secret holds 1 MiB", len(bomb))
	}
	secret := plantRevision(t, forger, ns, "app", 2, bomb)
	waitInvalid(t, registration, cr, 2, ns+"/"+secret, "more than the 33554432 (32 MiB) a release's JSON may take")

	// The same bomb, its trailer saying it inflates to 32 MiB.
	gz, err := base64.StdEncoding.DecodeString(string(bomb))
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(gz[len(gz)-4:], 32<<20)
	secret = plantRevision(t, forger, ns, "app", 3, []byte(base64.StdEncoding.EncodeToString(gz)))
	waitInvalid(t, registration, cr, 3, ns+"/"+secret, "inflates past the 33554432 bytes its gzip trailer gives")

	setKey(t, neighbour, "next-0", "drifted")
	waitForKey(t, neighbour, "next-0", "declared")
	if err := locker.Exited(); err != nil {
		t.Fatalf("the locker exited: %v", err)
	}
	peak := peakRSS(t, locker.PID())
	t.Logf("the locker's memory peaked at %d MiB before the bombs, %d MiB after", before>>20, peak>>20)
	if grew := peak - before; grew > 48<<20 {
		t.Errorf("the bombs grew the locker's peak memory by %d MiB, more than a release at the bound (32 MiB) and some: it inflated them", grew>>20)
	}
}

// TestPlantedReleaseSecretsDoNotStopAStart: a tenant who may create
// Secrets in its own namespace plants 100 MiB of them labelled as deployed
// Helm revisions, some of them of a registered release's name, before a
// locker starts. The locker starts within its memory, reads none of the
// planted ones into a lock, and locks the registered release.
func TestPlantedReleaseSecretsDoNotStopAStart(t *testing.T) {
	t.Parallel()
	ns, planted, registration := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	planter := tenant(t, planted, "tenant")
	t.Cleanup(func() {
		// The API server keeps every Secret in its watch cache.
		_ = env.Kube.CoreV1().Secrets(planted).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "owner=helm"})
	})
	noise := make([]byte, 760<<10)
	for i := range 100 {
		release := fmt.Sprintf("planted-%d", i)
		if i%5 == 0 {
			// Of the registered release's name, in the tenant's
			// namespace.
			release = "app"
		}
		_, _ = rand.Read(noise)
		plantRevision(t, planter, planted, release, i+1, []byte(base64.StdEncoding.EncodeToString(noise)))
	}

	env.Helm(t, framework.Helm3, "install", "app", framework.Chart(t, "configmaps"), "-n", ns, "--set", "count=2")
	cr := env.RegisterIn(t, registration, ns, "app")
	locker, err := env.StartLocker("planted-locker", "--namespace", registration, "--controller-name", "planted-locker", "--leader-elect=false")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Stop(10 * time.Second) }()
	env.WaitForStateIn(t, registration, cr, v1alpha1.StateDeployed, 1)
	setKey(t, ns, "app-1", "drifted")
	waitForKey(t, ns, "app-1", "declared")
	peak := peakRSS(t, locker.PID())
	t.Logf("the locker's memory peaked at %d MiB", peak>>20)
	if peak > maxLockerRSS {
		t.Errorf("the locker's memory peaked at %d MiB at start, past %d MiB: it read the planted Secrets", peak>>20, maxLockerRSS>>20)
	}
}
