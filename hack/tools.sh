#!/usr/bin/env bash
# Builds the binaries the e2e suite and the demo run, from the Go module proxy
# only: etcd, kube-apiserver, kube-controller-manager, kubectl, the helm v3
# and v4 CLIs, and Flux's source-controller.
#
# The helm CLIs are installed as v3/helm and v4/helm: Helm names its field
# manager after the binary, and users run it as "helm".
#
# Each binary is cached under $HELM_LOCKER_TOOLS (default
# ~/.cache/helm-locker/tools) in a folder named after its version, so a second
# run builds nothing and a version bump builds only what changed. Prints the
# folder's path on its last line. With the argument `helm`, it builds only
# the helm v4 CLI.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${HELM_LOCKER_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/helm-locker/tools}

# required MODULE GOMOD prints the version GOMOD requires of MODULE.
required() {
  local v
  v=$(awk -v m="$1" '{ for (i = 1; i < NF; i++) if ($i == m) { print $(i + 1); exit } }' "$2")
  [ -n "$v" ] || { echo "tools: $2 does not require $1" >&2; exit 1; }
  echo "$v"
}
KUBE_VERSION=$(required k8s.io/kubernetes "$ROOT/e2e/tools/kube/go.mod")
ETCD_VERSION=$(required go.etcd.io/etcd/server/v3 "$ROOT/e2e/tools/etcd/go.mod")
FLUX_SC_VERSION=$(required github.com/fluxcd/source-controller "$ROOT/e2e/tools/flux/go.mod")
HELM3_VERSION=v3.22.0
HELM4_VERSION=v4.3.1

BIN="$TOOLS/kube-$KUBE_VERSION-etcd-$ETCD_VERSION-helm-$HELM3_VERSION-$HELM4_VERSION"
mkdir -p "$BIN"

log() { echo "tools: $*" >&2; }

# build NAME CMD...: runs CMD to produce $BIN/NAME unless it is there already.
# CMD writes to $out, a temporary path, which is renamed only on success so an
# interrupted build never leaves a half-written binary behind.
build() {
  local name=$1; shift
  [ -x "$BIN/$name" ] && return 0
  log "building $name (first run only)"
  local start=$SECONDS
  mkdir -p "$(dirname "$BIN/$name")"
  out="$BIN/$name.tmp"
  "$@"
  mv "$out" "$BIN/$name"
  log "built $name in $((SECONDS - start))s"
}

kube_ldflags() {
  local v=${KUBE_VERSION#v} major minor
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}

build_kube() { (cd "$ROOT/e2e/tools/kube" && go build -trimpath -ldflags "$(kube_ldflags)" -o "$out" "k8s.io/kubernetes/cmd/$1"); }
build_flux_sc() { (cd "$ROOT/e2e/tools/flux" && go build -trimpath -ldflags "-s -w" -o "$out" github.com/fluxcd/source-controller); }
build_etcd() { (cd "$ROOT/e2e/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "$out" go.etcd.io/etcd/server/v3); }
# helm's go.mod has no replace directives, so `go install pkg@version` works
# outside any module; GOBIN keeps the two major versions apart.
build_helm() {
  local dir
  dir=$(mktemp -d)
  GOBIN=$dir go install -trimpath -ldflags "-s -w -X helm.sh/helm/$1/internal/version.version=$2" "helm.sh/helm/$1/cmd/helm@$2"
  mv "$dir/helm" "$out"
  rmdir "$dir"
}

# `tools.sh helm` builds the helm v4 CLI alone: all that `make chart` needs.
if [ "${1:-}" = helm ]; then
  build v4/helm build_helm v4 "$HELM4_VERSION"
  echo "$BIN"
  exit 0
fi

build etcd build_etcd
build kube-apiserver build_kube kube-apiserver
build kube-controller-manager build_kube kube-controller-manager
build kubectl build_kube kubectl
build v3/helm build_helm v3 "$HELM3_VERSION"
build v4/helm build_helm v4 "$HELM4_VERSION"
# Named by its version, so that a bump builds it alone.
build "flux/source-controller-$FLUX_SC_VERSION" build_flux_sc

echo "$BIN"
