#!/usr/bin/env bash
# Fetches Flux's CustomResourceDefinitions (Kustomization from kustomize-controller;
# GitRepository, OCIRepository and Bucket from source-controller) from the Go modules of those
# controllers at pinned versions, through the Go module proxy, into a cache directory outside
# the clone, keyed by the versions (and a hash of this script). A complete cache entry is reused
# as is. For the tests of `kubectl applyset convert` and of the handover from Flux
# (tests/flux_convert.rs, tests/flux_handover.rs), which install them in the test control plane.
#
# Prints the directory that holds the CRD files on its last line of stdout.
set -euo pipefail

KUSTOMIZE_CONTROLLER=v1.9.4
SOURCE_CONTROLLER=v1.9.2

script_hash=$(sha256sum "$0" | cut -c1-12)
CACHE="${APPLYSET_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/applyset-operator}"
DEST="$CACHE/flux-crds-kc${KUSTOMIZE_CONTROLLER#v}-sc${SOURCE_CONTROLLER#v}-${script_hash}"

if [ -f "$DEST/.complete" ]; then
  echo "fetch-flux-crds: using cached Flux CRDs in $DEST" >&2
  echo "$DEST"
  exit 0
fi

export GOTOOLCHAIN=local GOFLAGS=-mod=mod
# The module's directory in the module cache (downloaded once; go keeps it read-only).
module_dir() {
  go mod download -json "$1@$2" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p'
}
kc=$(module_dir github.com/fluxcd/kustomize-controller "$KUSTOMIZE_CONTROLLER")
sc=$(module_dir github.com/fluxcd/source-controller "$SOURCE_CONTROLLER")
[ -d "$kc" ] && [ -d "$sc" ] || { echo "fetch-flux-crds: the Go module proxy did not serve the Flux controllers' modules" >&2; exit 1; }

rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
cp "$kc/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml" "$DEST.tmp/"
for kind in gitrepositories ocirepositories buckets; do
  cp "$sc/config/crd/bases/source.toolkit.fluxcd.io_${kind}.yaml" "$DEST.tmp/"
done
chmod u+w "$DEST.tmp"/*.yaml
touch "$DEST.tmp/.complete"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "fetch-flux-crds: kustomize-controller $KUSTOMIZE_CONTROLLER, source-controller $SOURCE_CONTROLLER into $DEST" >&2
echo "$DEST"
