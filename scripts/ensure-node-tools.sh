#!/usr/bin/env bash
# Installs what `make image` and the test node need and the machine lacks. Idempotent: a package
# that is installed is left alone, and apt is only asked when something is missing.
#
#   scripts/ensure-node-tools.sh image   buildah, musl-tools, the Rust musl target
#   scripts/ensure-node-tools.sh node    containerd, runc, CNI plugins, iproute2, nsenter, musl-gcc
#   scripts/ensure-node-tools.sh         both
set -euo pipefail
what=${1:-all}
packages=()
case "$what" in
  image) packages=(buildah musl-tools ca-certificates) ;;
  node) packages=(containerd runc containernetworking-plugins iproute2 util-linux musl-tools) ;;
  all) packages=(buildah musl-tools ca-certificates containerd runc containernetworking-plugins iproute2 util-linux) ;;
  *) echo "usage: $0 [image|node|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  # dpkg's status, not a command lookup: containernetworking-plugins installs no command on PATH.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "ensure-node-tools: missing ${missing[*]} and no apt-get to install them (Debian/Ubuntu expected)" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "ensure-node-tools: missing ${missing[*]}; installing them needs root" >&2
    exit 1
  fi
  echo "ensure-node-tools: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine may have no package lists yet; update only then or when install fails.
  if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
    apt-get update >&2
    apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
fi

if [ "$what" != node ]; then
  target=x86_64-unknown-linux-musl
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "ensure-node-tools: adding the Rust target $target" >&2
    rustup target add "$target" >&2
  fi
fi
