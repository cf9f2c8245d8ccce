#!/usr/bin/env bash
# cluster.sh up|down — a local control plane in the background for people (make cluster-up /
# cluster-down). State in .local/cluster, kubeconfig at .local/kubeconfig, kubectl at
# .local/bin/kubectl. Both commands are idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOCAL="$ROOT/.local"
PIDFILE="$LOCAL/cluster.pid"
TESTENV="${TESTENV:-$ROOT/target/debug/testenv}"

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "${1:-}" in
up)
  mkdir -p "$LOCAL/bin"
  bin_dir=$("$TESTENV" bin-dir)
  ln -sf "$bin_dir/kubectl" "$LOCAL/bin/kubectl"
  if running && [ -f "$LOCAL/kubeconfig" ]; then
    echo "cluster already up (kubeconfig $LOCAL/kubeconfig)"; exit 0
  fi
  rm -rf "$LOCAL/cluster" "$LOCAL/kubeconfig"
  APPLYSET_TESTENV_BIN="$bin_dir" setsid "$TESTENV" run --state-dir "$LOCAL/cluster" \
    --kubeconfig "$LOCAL/kubeconfig" >"$LOCAL/cluster.log" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  for _ in $(seq 1 1200); do
    [ -f "$LOCAL/kubeconfig" ] && { echo "cluster up: export KUBECONFIG=$LOCAL/kubeconfig"; exit 0; }
    running || { echo "cluster failed to start:" >&2; cat "$LOCAL/cluster.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "cluster did not become ready in 120s; see $LOCAL/cluster.log" >&2; exit 1
  ;;
down)
  if running; then
    pid=$(cat "$PIDFILE")
    # The launcher's guard stops etcd, kube-apiserver and kube-controller-manager and removes
    # the state directory once the launcher is gone; wait for that.
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      [ -d "$LOCAL/cluster" ] || break
      sleep 0.1
    done
  fi
  rm -f "$PIDFILE" "$LOCAL/kubeconfig"
  echo "cluster down"
  ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
