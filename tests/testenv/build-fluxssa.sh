#!/usr/bin/env bash
# Builds the fluxssa program (fluxssa/ beside this script: reads cases as JSON and prints what
# github.com/fluxcd/pkg/ssa, as kustomize-controller configures it, decides of them; for
# tests/flux_ssa.rs) from its go.mod and go.sum, through the Go module proxy, into a cache
# directory outside the clone, keyed by the fluxcd/pkg/ssa version, a hash of the program's
# sources (and of this script) and the Go version. A complete cache entry is reused as is. Same
# conventions as build-kstatus.sh.
#
# Prints the directory that holds the `fluxssa` binary on its last line of stdout.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/fluxssa"

ssa_version=$(sed -n 's/^\s*github.com\/fluxcd\/pkg\/ssa \(v[0-9.]*\).*/\1/p' "$MOD/go.mod")
[ -n "$ssa_version" ] || { echo "build-fluxssa: cannot read the fluxcd/pkg/ssa version from go.mod" >&2; exit 1; }
go_version=$(go env GOVERSION)
# The program is ours, so a change of its sources or of how it is built gives a new entry.
sources_hash=$(cat "$MOD/go.mod" "$MOD/go.sum" "$MOD/main.go" "$0" | sha256sum | cut -c1-12)

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/fluxssa-${ssa_version#v}-${sources_hash}-${go_version}"

complete() { [ -x "$DEST/fluxssa" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-fluxssa: using cached fluxssa in $DEST" >&2
  echo "$DEST"
  exit 0
fi

# -mod=readonly: the committed go.sum must already hold every module (no silent updates);
# -buildvcs=false: the binary does not depend on the state of the clone.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
start=$(date +%s)
echo "build-fluxssa: building fluxssa (fluxcd/pkg/ssa $ssa_version)" >&2
(cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$DEST.tmp/fluxssa" .)

touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-fluxssa: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
