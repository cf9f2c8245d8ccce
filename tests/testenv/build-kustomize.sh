#!/usr/bin/env bash
# Builds kustomize from the published Go module sigs.k8s.io/kustomize/kustomize/v5 (through the
# Go module proxy) into a cache directory outside the clone, keyed by the kustomize version and
# the Go version. A complete cache entry is reused as is. Same conventions as build-helm.sh.
#
# Prints the directory that holds the `kustomize` binary on its last line of stdout.
set -euo pipefail

KUSTOMIZE_VERSION=5.7.1
go_version=$(go env GOVERSION)

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/kustomize-${KUSTOMIZE_VERSION}-${go_version}"

complete() { [ -x "$DEST/kustomize" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-kustomize: using cached kustomize in $DEST" >&2
  echo "$DEST"
  exit 0
fi

# `go install pkg@version` builds the module as published (its go.mod has no replace
# directives), in module mode, with no go.mod of ours involved.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
start=$(date +%s)
echo "build-kustomize: building kustomize v$KUSTOMIZE_VERSION (first build takes a few minutes)" >&2
# Run from a directory without a go.mod so that no enclosing module is consulted.
(cd "$DEST.tmp" && GOBIN="$DEST.tmp" go install -trimpath -ldflags="-s -w" \
   "sigs.k8s.io/kustomize/kustomize/v5@v$KUSTOMIZE_VERSION")

"$DEST.tmp/kustomize" version >&2
touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-kustomize: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
