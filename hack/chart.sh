#!/usr/bin/env bash
# Packages deploy/chart/helm-locker as bin/chart/helm-locker-$VERSION.tgz,
# with version and appVersion $VERSION (so its image tag is $VERSION too).
# With $REGISTRY, the packaged chart's image is $REGISTRY/helm-locker, the
# one `make image` pushes with the same variables, and the chart is pushed to
# oci://$REGISTRY/charts (over plain HTTP with $PLAIN_HTTP), its digest
# written to bin/chart/digest for signing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
: "${VERSION:?VERSION must be set}"
REGISTRY=${REGISTRY:-}
# HELM may name a helm v4 CLI; otherwise hack/tools.sh builds one (once).
helm=${HELM:-$(bash hack/tools.sh helm | tail -1)/v4/helm}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r deploy/chart/helm-locker "$work/"
if [ -n "$REGISTRY" ]; then
  values="$work/helm-locker/values.yaml"
  published='^  repository: ghcr.io/helm-locker/helm-locker$'
  grep -q "$published" "$values" || { echo "chart: values.yaml has no image.repository line to set" >&2; exit 1; }
  sed -i "s|$published|  repository: $REGISTRY/helm-locker|" "$values"
fi

mkdir -p bin/chart
rm -f bin/chart/digest
"$helm" package "$work/helm-locker" --version "$VERSION" --app-version "$VERSION" -d bin/chart
[ -n "$REGISTRY" ] || exit 0

flags=()
[ -z "${PLAIN_HTTP:-}" ] || flags+=(--plain-http)
out=$("$helm" push "bin/chart/helm-locker-$VERSION.tgz" "oci://$REGISTRY/charts" "${flags[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
echo "$out"
sed -n 's/^Digest: //p' <<<"$out" >bin/chart/digest
