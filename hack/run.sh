#!/usr/bin/env bash
# make run: install the CRDs, apply examples/ once the operator is up, and run the operator in
# the foreground (Ctrl-C stops it; `make cluster-down` stops the local control plane).
#
# Which cluster: only one it was told to use.
#   - KUBECONFIG set (not empty): that kubeconfig, as it is.
#   - CONTEXT=current (make run CONTEXT=current): the current context of the default
#     kubeconfig (~/.kube/config).
#   - CONTEXT=NAME: context NAME of the default kubeconfig (written, alone, to
#     .local/context.kubeconfig; the kubeconfig itself is not changed).
#   - otherwise: the local control plane (started if needed), whatever ~/.kube/config names.
# `hack/run.sh --decide` prints the choice and does nothing else.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# Prints the cluster to use: `kubeconfig PATH`, `context NAME` (of the default kubeconfig) or
# `local`.
decide() {
  if [ -n "${KUBECONFIG:-}" ]; then
    echo "kubeconfig $KUBECONFIG"
  elif [ -n "${CONTEXT:-}" ]; then
    echo "context $CONTEXT"
  else
    echo "local"
  fi
}

choice=$(decide)
if [ "${1:-}" = "--decide" ]; then
  echo "$choice"
  exit 0
fi
KUBECTL="$(tests/testenv/build-kube.sh 2>/dev/null)/kubectl"
case "$choice" in
  local)
    make -s cluster-up
    export KUBECONFIG="$ROOT/.local/kubeconfig"
    ;;
  "context current")
    export KUBECONFIG="$HOME/.kube/config"
    ;;
  context\ *)
    mkdir -p .local
    (umask 077 && "$KUBECTL" --kubeconfig "$HOME/.kube/config" config view --minify --flatten \
      --context "$CONTEXT" > .local/context.kubeconfig)
    export KUBECONFIG="$ROOT/.local/context.kubeconfig"
    ;;
esac
echo "run: using cluster $("$KUBECTL" config view --minify -o jsonpath='{.clusters[0].cluster.server}') ($choice)"
"$KUBECTL" apply --server-side --field-manager=applyset-operator-install -f config/crd/applyset.dev.yaml
"$KUBECTL" wait --for=condition=Established --timeout=60s crd/applysets.applyset.dev crd/clusterapplysets.applyset.dev
cargo build --locked -q --bin applyset-operator
# Apply the examples as soon as the operator process is running.
( sleep 1; "$KUBECTL" apply -f examples/ && echo "run: examples applied; watch them with:" \
    && echo "  KUBECONFIG=$KUBECONFIG $KUBECTL get applysets,clusterapplysets -A" ) &
exec target/debug/applyset-operator run
