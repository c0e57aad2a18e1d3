#!/usr/bin/env bash
# `make image`: the container image that ships, built here without pulling anything.
#
# 1. `hap` as a static musl binary (cargo profile `image`, target x86_64-unknown-linux-musl),
#    with source paths remapped so the binary does not depend on where the checkout lives;
# 2. `buildah bud` of the Containerfile (FROM scratch) with `--timestamp 0 --network none`,
#    pushed to an OCI archive that containerd imports (`ctr images import`);
# 3. the same build a second time: the manifest digests must be equal (reproducible), else fail.
#
# Prints the archive's path on stdout; progress and the figures (build time, sizes, digest) go
# to stderr. buildah runs with configuration and storage of its own under
# ~/.cache/hap-operator/containers (scripts/buildah-env.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/ensure-node-tools.sh" image

cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
image="ghcr.io/hap-operator/hap-operator:$version"
triple=x86_64-unknown-linux-musl
out="$CARGO_TARGET_DIR/image"
archive="$out/hap-operator-$version.oci.tar"
mkdir -p "$out"

# --- the binary ---------------------------------------------------------------------------------
start=$(date +%s)
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
export CC_x86_64_unknown_linux_musl=musl-gcc
export SOURCE_DATE_EPOCH=0
# Only the target's flags: build scripts and proc macros stay shared with other builds.
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="--remap-path-prefix=$root=. --remap-path-prefix=$cargo_home/registry/src=registry -C target-feature=+crt-static"
echo "image: cargo build --profile image --target $triple (a cold build takes several minutes on 2 cores)" >&2
cargo build --locked --profile image --target "$triple" --bin hap >&2
bin="$CARGO_TARGET_DIR/$triple/image/hap"
build_s=$(( $(date +%s) - start ))
# A static binary has no program interpreter; the scratch image has no loader to offer.
if grep -q "ld-linux\|ld-musl" <(head -c 4096 "$bin" | tr -c '[:print:]' '\n'); then
  echo "image: $bin is dynamically linked; the scratch image cannot run it" >&2
  exit 1
fi

# --- buildah, configured under the cache ----------------------------------------------------------
# shellcheck source=scripts/buildah-env.sh
. "$root/scripts/buildah-env.sh"

ctx=$(mktemp -d "$out/context.XXXXXX")
tag="localhost/hap-operator-build:$$"
cleanup() {
  buildah rmi -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$ctx" "$archive.again"
  if [ "$blob_cache_was_there" = no ]; then rm -rf /var/lib/containers; fi
}
trap cleanup EXIT
install -m 0555 "$bin" "$ctx/hap"
install -m 0444 /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
cp Containerfile "$ctx/Containerfile"

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
  revision="$revision-dirty"
fi
annotations=(
  --annotation "org.opencontainers.image.title=hap-operator"
  --annotation "org.opencontainers.image.description=Hyperscaler Account Pool operator for Gardener"
  --annotation "org.opencontainers.image.source=https://github.com/hap-operator/hap-operator"
  --annotation "org.opencontainers.image.licenses=Apache-2.0"
  --annotation "org.opencontainers.image.version=$version"
  --annotation "org.opencontainers.image.revision=$revision"
  --annotation "org.opencontainers.image.created=1970-01-01T00:00:00Z"
)

# build_to ARCHIVE: one reproducible build, pushed to an OCI archive; prints the manifest digest.
build_to() {
  buildah bud --quiet --timestamp 0 --network none --layers=false --pull-never \
    --signature-policy "$conf/policy.json" \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    "${annotations[@]}" -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null
  rm -f "$1" "$out/digest"
  buildah push --quiet --signature-policy "$conf/policy.json" --digestfile "$out/digest" \
    "$tag" "oci-archive:$1:$image" >&2
  buildah rmi -f "$tag" >/dev/null
  cat "$out/digest"
}
start=$(date +%s)
digest=$(build_to "$archive")
again=$(build_to "$archive.again")
image_s=$(( $(date +%s) - start ))
if [ "$digest" != "$again" ]; then
  echo "image: NOT reproducible: two builds of the same binary gave $digest and $again" >&2
  exit 1
fi
echo "$digest" >"$out/digest"
echo "image: $image $digest (reproducible: built twice, same digest)" >&2
echo "image: binary $(stat -c %s "$bin") bytes, OCI archive $(stat -c %s "$archive") bytes; cargo ${build_s}s, two buildah builds ${image_s}s" >&2
echo "$archive"
