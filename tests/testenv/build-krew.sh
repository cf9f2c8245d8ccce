#!/usr/bin/env bash
# Builds krew, the kubectl plugin manager (sigs.k8s.io/krew/cmd/krew, pinned by krew/go.mod
# and go.sum beside this script), through the Go module proxy, into a cache directory outside
# the clone, keyed by the krew version, a hash of go.mod, go.sum and this script, and the Go
# version. A complete cache entry is reused as is. Same conventions as build-kstatus.sh.
# tests/krew.rs installs the plugin's krew manifest with it.
#
# Prints the directory that holds the `krew` binary on its last line of stdout.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/krew"

krew_version=$(sed -n 's/^\s*sigs.k8s.io\/krew \(v[0-9.]*\).*/\1/p' "$MOD/go.mod")
[ -n "$krew_version" ] || { echo "build-krew: cannot read the krew version from go.mod" >&2; exit 1; }
go_version=$(go env GOVERSION)
sources_hash=$(cat "$MOD/go.mod" "$MOD/go.sum" "$0" | sha256sum | cut -c1-12)

CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/krew-${krew_version#v}-${sources_hash}-${go_version}"

complete() { [ -x "$DEST/krew" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-krew: using cached krew in $DEST" >&2
  echo "$DEST"
  exit 0
fi

# -mod=readonly: the committed go.sum must already hold every module (no silent updates);
# -buildvcs=false: the binary does not depend on the state of the clone.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
start=$(date +%s)
echo "build-krew: building krew $krew_version" >&2
(cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$DEST.tmp/krew" sigs.k8s.io/krew/cmd/krew)

touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-krew: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
