#!/usr/bin/env bash
# make dist: the kubectl plugin's archive for this machine's platform and its krew manifest,
# filled from the template plugins/applyset.yaml, in OUT (default target/dist):
#   kubectl-applyset_v<version>_<os>_<arch>.tar.gz   the binary (and README.md)
#   applyset.yaml                                      the manifest: this platform's uri and sha256
# Install it with: kubectl krew install --manifest=OUT/applyset.yaml --archive=OUT/<archive>
#
# Environment: PROFILE (release, or debug), DIST_BIN (a built kubectl-applyset to package
# instead of building one), DIST_BASE_URL (where a release pipeline publishes the archives;
# default: file:// of OUT), DIST_HOMEPAGE.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/target/dist}
PROFILE=${PROFILE:-release}

version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")
[ -n "$version" ] || { echo "dist: no version in Cargo.toml" >&2; exit 1; }
os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "dist: unknown machine $(uname -m)" >&2; exit 1 ;;
esac

bin=${DIST_BIN:-}
if [ -z "$bin" ]; then
  if [ "$PROFILE" = release ]; then
    (cd "$ROOT" && cargo build --locked --release --bin kubectl-applyset)
  else
    (cd "$ROOT" && cargo build --locked --bin kubectl-applyset)
  fi
  bin="$ROOT/target/$PROFILE/kubectl-applyset"
fi

mkdir -p "$OUT"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/kubectl-applyset"
cp "$ROOT/README.md" "$stage/README.md"
archive="kubectl-applyset_v${version}_${os}_${arch}.tar.gz"
# Reproducible: sorted names, no owner, a fixed time.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - \
  kubectl-applyset README.md | gzip -n > "$OUT/$archive"
sha=$(sha256sum "$OUT/$archive" | cut -d' ' -f1)
base=${DIST_BASE_URL:-file://$OUT}
homepage=${DIST_HOMEPAGE:-https://github.com/applyset-operator/applyset-operator}

# Fill this platform; leave out the blocks of the others (a manifest with placeholders is not
# valid).
awk -v plat="$os $arch" -v uri="$base/$archive" -v sha="$sha" -v version="$version" -v home="$homepage" '
  /^  # platform: / { keep = (substr($0, index($0, ":") + 2) == plat); next }
  /^[^ ]/ || /^  [^ -]/ { keep = 1 }
  keep == 0 && inblock { next }
  { inblock = ($0 ~ /^  platforms:/) ? 1 : inblock }
  { gsub("@VERSION@", version); gsub("@HOMEPAGE@", home)
    gsub("@URI_" osarch "@", uri); gsub("@SHA256_" osarch "@", sha); print }
' osarch="${os}_${arch}" keep=1 "$ROOT/plugins/applyset.yaml" | grep -v '^#' > "$OUT/applyset.yaml"
if grep -q '@' "$OUT/applyset.yaml"; then
  echo "dist: placeholders left in $OUT/applyset.yaml" >&2; exit 1
fi
echo "dist: $OUT/$archive (sha256 $sha) and $OUT/applyset.yaml" >&2
