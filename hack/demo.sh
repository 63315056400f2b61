#!/usr/bin/env bash
# make demo: a local control plane, a real chart installed by the real helm
# CLI, helm-locker locking it, and a kubectl edit reverted as you watch.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

TOOLS=$(bash hack/tools.sh)
KUBECTL="$TOOLS/kubectl"
HELM="$TOOLS/v4/helm"
WORK=$(mktemp -d)
export HELM_CACHE_HOME=$WORK/helm/cache HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data

step "Building helm-locker"
make --no-print-directory build

step "Starting a local etcd, kube-apiserver and kube-controller-manager"
started_cluster=false
if ! [ -f .cache/cluster.pid ] || ! kill -0 "$(cat .cache/cluster.pid)" 2>/dev/null; then
  started_cluster=true
fi
export KUBECONFIG=$(bash hack/cluster.sh up | tail -n 1)
locker_pid=
cleanup() {
  [ -n "$locker_pid" ] && kill "$locker_pid" 2>/dev/null && wait "$locker_pid" 2>/dev/null
  jobs -p | xargs -r kill 2>/dev/null
  if $started_cluster; then bash hack/cluster.sh down; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
echo "kubeconfig: $KUBECONFIG"

NS=demo-$(date +%s)
step "Installing the chart 'helm create' makes, with Helm 4 (server-side apply), into namespace $NS"
"$HELM" create "$WORK/web" >/dev/null
"$KUBECTL" create namespace "$NS" >/dev/null
"$HELM" install web "$WORK/web" -n "$NS" | sed -n '1,6p'

step "Starting helm-locker (log: $WORK/locker.log)"
# The locker only updates its webhook configuration, by name; the chart
# creates it in a cluster, and here we do, empty, as the chart does.
cat <<YAML | "$KUBECTL" apply -f - >/dev/null
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: helm-locker.cattle-helm-system
YAML
# The API server calls Prevent mode's webhook back over loopback TLS.
bin/helm-locker --kubeconfig "$KUBECONFIG" --v=4 \
  --webhook-bind-address=127.0.0.1:9443 --webhook-url=https://127.0.0.1:9443/validate >"$WORK/locker.log" 2>&1 &
locker_pid=$!

step "Registering the release with a HelmRelease"
for _ in $(seq 1 100); do "$KUBECTL" get crd helmreleases.helm.cattle.io >/dev/null 2>&1 && break; sleep 0.1; done
cat <<YAML | tee /dev/stderr | "$KUBECTL" apply -f - >/dev/null
apiVersion: helm.cattle.io/v1alpha1
kind: HelmRelease
metadata:
  name: web
  namespace: cattle-helm-system
spec:
  release:
    name: web
    namespace: $NS
YAML
"$KUBECTL" wait -n cattle-helm-system helmrelease/web --for=jsonpath='{.status.state}'=Deployed --timeout=60s >/dev/null
"$KUBECTL" get helmreleases -n cattle-helm-system

step "Watching Service web's ports while someone changes them with kubectl patch"
"$KUBECTL" get service web -n "$NS" -w --output-watch-events \
  -o jsonpath='{.type}{"\t"}{.object.metadata.resourceVersion}{"\tports="}{.object.spec.ports[*].port}{"\n"}' |
  while IFS= read -r line; do printf '  %s  %s\n' "$(date +%T.%3N)" "$line"; done &
sleep 1
printf '  %s  kubectl patch: ports -> [81]\n' "$(date +%T.%3N)"
"$KUBECTL" patch service web -n "$NS" --type merge \
  -p '{"spec":{"ports":[{"port":81,"targetPort":"http","protocol":"TCP","name":"http"}]}}' >/dev/null
sleep 1.5
kill %% 2>/dev/null || true
echo
echo "  The locker's view:"
grep -E 'Reverted drift|Lock state changed' "$WORK/locker.log" | sed 's/^/    /' | tail -n 3

step "Prevent mode: the same edit denied before it is stored"
"$KUBECTL" patch helmrelease web -n cattle-helm-system --type merge -p '{"spec":{"mode":"Prevent"}}' >/dev/null
for _ in $(seq 1 100); do
  "$KUBECTL" get validatingwebhookconfiguration helm-locker.cattle-helm-system -o jsonpath='{.webhooks[0].rules[*].resources}' 2>/dev/null | grep -qw services && break
  sleep 0.2
done
if out=$("$KUBECTL" patch service web -n "$NS" --type merge \
  -p '{"spec":{"ports":[{"port":81,"targetPort":"http","protocol":"TCP","name":"http"}]}}' 2>&1); then
  echo "demo: the edit was allowed in Prevent mode: $out" >&2; exit 1
fi
echo "$out" | sed 's/^/  /'
echo "  Service ports: $("$KUBECTL" get service web -n "$NS" -o jsonpath='{.spec.ports[*].port}')"

step "Helm stays in charge: helm upgrade --set service.port=8080, no force flags"
"$HELM" upgrade web "$WORK/web" -n "$NS" --set service.port=8080 | sed -n '1,2p'
"$KUBECTL" wait -n cattle-helm-system helmrelease/web --for=jsonpath='{.status.version}'=2 --timeout=60s >/dev/null
"$KUBECTL" get helmreleases -n cattle-helm-system
echo "  Service ports now: $("$KUBECTL" get service web -n "$NS" -o jsonpath='{.spec.ports[*].port}')"
ports=$("$KUBECTL" get service web -n "$NS" -o jsonpath='{.spec.ports[*].port}')
[ "$ports" = "8080" ] || { echo "demo: expected ports 8080, got $ports" >&2; exit 1; }
step "Done"
