#!/usr/bin/env bash
# Prints the version a build is stamped with, as a semantic version without
# a leading v, so that it serves as the chart's version, its appVersion and
# the image tag alike: on a tag v1.2.3, 1.2.3; past it, 1.2.3-N-gSHA; with no
# tag, 0.0.0-gSHA; -dirty appended when tracked files differ from the commit.
set -euo pipefail
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
  echo "${v#v}"
  exit 0
fi
sha=$(git rev-parse --short=12 HEAD 2>/dev/null) || { echo 0.0.0-dev; exit 0; }
dirty=
git diff --quiet HEAD -- 2>/dev/null || dirty=-dirty
echo "0.0.0-g$sha$dirty"
