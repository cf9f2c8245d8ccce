#!/usr/bin/env bash
# Builds Flux's kustomize-controller from its Go module (github.com/fluxcd/kustomize-controller,
# pinned below) through the Go module proxy, into a cache directory outside the clone, keyed by
# its version, a hash of this script and the Go version. A complete cache entry is reused as
# is. For tests/flux_handover.rs: objects are first applied by the real controller, and the
# handover is checked against its real finalizer.
#
# The module's go.mod replaces its api module with ./api, which is a module of its own and so
# not in the main module's download: the build uses the api module of the same version from the
# proxy instead (the replace is dropped; -mod=mod records its checksum, verified against the
# checksum database).
#
# Prints the directory that holds the `kustomize-controller` binary on its last line of stdout.
set -euo pipefail

VERSION=v1.9.4

go_version=$(go env GOVERSION)
script_hash=$(sha256sum "$0" | cut -c1-12)
CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/kustomize-controller-${VERSION#v}-${script_hash}-${go_version}"

complete() { [ -x "$DEST/kustomize-controller" ] && [ -f "$DEST/.complete" ]; }

if complete; then
  echo "build-kustomize-controller: using cached kustomize-controller in $DEST" >&2
  echo "$DEST"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/kustomize-controller@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "build-kustomize-controller: the Go module proxy did not serve kustomize-controller $VERSION" >&2; exit 1; }

rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp/src"
cp -r "$dir/." "$DEST.tmp/src/"
chmod -R u+w "$DEST.tmp/src"
start=$(date +%s)
echo "build-kustomize-controller: building kustomize-controller $VERSION" >&2
(
  cd "$DEST.tmp/src"
  go mod edit -dropreplace github.com/fluxcd/kustomize-controller/api
  GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags="-s -w" -o "$DEST.tmp/kustomize-controller" .
)
rm -rf "$DEST.tmp/src"
touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "build-kustomize-controller: built in $(( $(date +%s) - start ))s into $DEST" >&2
echo "$DEST"
