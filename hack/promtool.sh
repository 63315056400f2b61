#!/usr/bin/env bash
# Prints the path of a promtool, for the chart's alert rules tests:
# $PROMTOOL if set, one on PATH, or else the promtool of Debian's
# prometheus package, extracted once (no install, no service started)
# into ~/.cache/helm-locker/promtool. `go install` of the prometheus
# module fails on its replace directives.
set -euo pipefail

if [[ -n "${PROMTOOL:-}" ]]; then
	echo "$PROMTOOL"
	exit 0
fi
if command -v promtool >/dev/null 2>&1; then
	command -v promtool
	exit 0
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/helm-locker/promtool"
bin="$cache/usr/bin/promtool"
if [[ ! -x "$bin" ]]; then
	command -v apt-get >/dev/null || { echo "promtool: not found, and no apt-get to fetch Debian's prometheus package; set PROMTOOL" >&2; exit 1; }
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	# The package lists may be empty on a fresh machine.
	(cd "$work" && apt-get download prometheus >&2) ||
		{ apt-get update >&2 && (cd "$work" && apt-get download prometheus >&2); }
	mkdir -p "$cache"
	dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$cache" ./usr/bin/promtool
fi
"$bin" --version >/dev/null
echo "$bin"
