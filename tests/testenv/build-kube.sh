#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kubectl from published Go modules
# (kube/go.mod and etcd/go.mod beside this script) into a cache directory outside the clone, keyed by the
# Kubernetes and etcd versions and the Go version. A complete cache entry is reused as is.
#
# Prints the directory that holds the binaries on its last line of stdout.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
KUBE_MOD="$HERE/kube"
ETCD_MOD="$HERE/etcd"

kube_version=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' "$KUBE_MOD/go.mod")
etcd_version=$(sed -n 's/^require go.etcd.io\/etcd\/server\/v3 \(v[0-9.]*\).*/\1/p' "$ETCD_MOD/go.mod")
go_version=$(go env GOVERSION)
[ -n "$kube_version" ] && [ -n "$etcd_version" ] || { echo "build-kube: cannot read versions from go.mod files" >&2; exit 1; }

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/kube-${kube_version#v}-etcd-${etcd_version#v}-${go_version}"
BINS=(etcd kube-apiserver kube-controller-manager kubectl)

complete() { for b in "${BINS[@]}"; do [ -x "$DEST/$b" ] || return 1; done; [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-kube: using cached binaries in $DEST" >&2
  echo "$DEST"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$DEST.tmp"
start=$(date +%s)

v=${kube_version#v}; major=${v%%.*}; rest=${v#*.}; minor=${rest%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$kube_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

echo "build-kube: building etcd $etcd_version (first build takes a few minutes)" >&2
(cd "$ETCD_MOD" && go build -trimpath -ldflags="-s -w" -o "$DEST.tmp/etcd" go.etcd.io/etcd/server/v3)

for cmd in kube-apiserver kube-controller-manager kubectl; do
  echo "build-kube: building $cmd $kube_version" >&2
  (cd "$KUBE_MOD" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$ldflags" \
     -o "$DEST.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done

touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-kube: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
