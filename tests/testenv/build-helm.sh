#!/usr/bin/env bash
# Builds helm from the published Go module helm.sh/helm/v4 (through the Go module proxy) into a
# cache directory outside the clone, keyed by the helm version and the Go version. A complete
# cache entry is reused as is. Same conventions as build-kube.sh.
#
# Prints the directory that holds the `helm` binary on its last line of stdout.
set -euo pipefail

HELM_VERSION=4.3.1
go_version=$(go env GOVERSION)

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/helm-${HELM_VERSION}-${go_version}"

complete() { [ -x "$DEST/helm" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-helm: using cached helm in $DEST" >&2
  echo "$DEST"
  exit 0
fi

# `go install pkg@version` builds the module as published (its go.mod has no replace
# directives), in module mode, with no go.mod of ours involved.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
start=$(date +%s)
echo "build-helm: building helm v$HELM_VERSION (first build takes a few minutes)" >&2
# Run from a directory without a go.mod so that no enclosing module is consulted.
(cd "$DEST.tmp" && GOBIN="$DEST.tmp" go install -trimpath \
   -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" \
   "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION")

"$DEST.tmp/helm" version --short >&2
touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-helm: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
