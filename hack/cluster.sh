#!/usr/bin/env bash
# Starts (up) or stops (down) the local control plane in the background.
# `up` prints the path of an admin kubeconfig on its last line.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${CLUSTER_DIR:-$ROOT/.cache/cluster}
PIDFILE=$ROOT/.cache/cluster.pid

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "${1:-}" in
up)
  if running; then
    echo "cluster already running (pid $(cat "$PIDFILE"))" >&2
    cat "$DIR/ready"
    exit 0
  fi
  TOOLS_BIN=$(bash "$ROOT/hack/tools.sh")
  mkdir -p "$ROOT/.cache" "$ROOT/bin"
  (cd "$ROOT" && go build -o bin/local-cluster ./e2e/cmd/local-cluster)
  rm -f "$DIR/ready"
  # setsid detaches the cluster from this shell, so it outlives `make`.
  HELM_LOCKER_TOOLS_BIN=$TOOLS_BIN setsid "$ROOT/bin/local-cluster" --dir "$DIR" \
    >"$ROOT/.cache/cluster.log" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 240); do
    if [ -f "$DIR/ready" ]; then
      echo "cluster running (pid $(cat "$PIDFILE")); stop it with 'make cluster-down'" >&2
      cat "$DIR/ready"
      exit 0
    fi
    if ! running; then
      echo "cluster failed to start:" >&2
      cat "$ROOT/.cache/cluster.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "cluster not ready after 120s; see $ROOT/.cache/cluster.log" >&2
  exit 1
  ;;
down)
  if running; then
    pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    echo "cluster stopped" >&2
  else
    echo "no cluster running" >&2
  fi
  rm -f "$PIDFILE"
  ;;
*)
  echo "usage: $0 up|down" >&2
  exit 2
  ;;
esac
