#!/usr/bin/env bash
# Builds the real `sops` (Go module github.com/getsops/sops/v3) and `age-keygen` (Go module
# filippo.io/age) through the Go module proxy into a cache directory outside the clone, keyed by
# both versions and the Go version. A complete cache entry is reused as is. Same conventions as
# build-helm.sh. The SOPS tests encrypt their fixtures with these at test time.
#
# Prints the directory that holds `sops` and `age-keygen` on its last line of stdout.
set -euo pipefail

SOPS_VERSION=3.11.0
AGE_VERSION=1.2.1
go_version=$(go env GOVERSION)

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/sops-${SOPS_VERSION}-age-${AGE_VERSION}-${go_version}"

complete() { [ -x "$DEST/sops" ] && [ -x "$DEST/age-keygen" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-sops: using cached sops and age-keygen in $DEST" >&2
  echo "$DEST"
  exit 0
fi

# `go install pkg@version` builds the module as published, in module mode, with no go.mod of
# ours involved.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
start=$(date +%s)
echo "build-sops: building sops v$SOPS_VERSION and age-keygen v$AGE_VERSION (first build takes a few minutes)" >&2
# Run from a directory without a go.mod so that no enclosing module is consulted.
(cd "$DEST.tmp" && GOBIN="$DEST.tmp" go install -trimpath -ldflags="-s -w" \
   "filippo.io/age/cmd/age-keygen@v$AGE_VERSION")
(cd "$DEST.tmp" && GOBIN="$DEST.tmp" go install -trimpath -ldflags="-s -w" \
   "github.com/getsops/sops/v3/cmd/sops@v$SOPS_VERSION")

"$DEST.tmp/sops" --version --disable-version-check >&2
"$DEST.tmp/age-keygen" --version >&2
touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-sops: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
