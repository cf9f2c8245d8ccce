#!/usr/bin/env bash
# Builds the CNCF distribution registry (`registry`, the reference OCI registry) from the
# published Go module github.com/distribution/distribution/v3 (through the Go module proxy)
# into a cache directory outside the clone, keyed by its version and the Go version. A
# complete cache entry is reused as is. Same conventions as build-kube.sh and build-helm.sh.
# The OCI source tests (tests/sources_oci.rs) start it on a loopback port.
#
# Prints the directory that holds the `registry` binary on its last line of stdout.
set -euo pipefail

REGISTRY_VERSION=3.1.2
go_version=$(go env GOVERSION)

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/registry-${REGISTRY_VERSION}-${go_version}"

complete() { [ -x "$DEST/registry" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-registry: using cached registry in $DEST" >&2
  echo "$DEST"
  exit 0
fi

# `go install pkg@version` builds the module as published (its go.mod has no replace
# directives), in module mode, with no go.mod of ours involved.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
start=$(date +%s)
echo "build-registry: building registry v$REGISTRY_VERSION (first build takes a few minutes)" >&2
(cd "$DEST.tmp" && GOBIN="$DEST.tmp" go install -trimpath -ldflags="-s -w" \
   "github.com/distribution/distribution/v3/cmd/registry@v$REGISTRY_VERSION")

"$DEST.tmp/registry" --version >&2
touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-registry: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
