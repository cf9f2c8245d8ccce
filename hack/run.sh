#!/usr/bin/env bash
# make run: with no cluster configured (no KUBECONFIG, no ~/.kube/config), start the local
# control plane; install the CRDs; apply examples/ once the operator is up; run the operator
# in the foreground (Ctrl-C stops it; `make cluster-down` stops the control plane).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ -z "${KUBECONFIG:-}" ] && [ ! -f "$HOME/.kube/config" ]; then
  make -s cluster-up
  export KUBECONFIG="$ROOT/.local/kubeconfig"
fi
KUBECTL="$(tests/testenv/build-kube.sh 2>/dev/null)/kubectl"
echo "run: using cluster $("$KUBECTL" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
"$KUBECTL" apply --server-side --field-manager=applyset-operator-install -f config/crd/applyset.dev.yaml
"$KUBECTL" wait --for=condition=Established --timeout=60s crd/applysets.applyset.dev crd/clusterapplysets.applyset.dev
cargo build --locked -q --bin applyset-operator
# Apply the examples as soon as the operator process is running.
( sleep 1; "$KUBECTL" apply -f examples/ && echo "run: examples applied; watch them with:" \
    && echo "  KUBECONFIG=$KUBECONFIG $KUBECTL get applysets,clusterapplysets -A" ) &
exec target/debug/applyset-operator run
