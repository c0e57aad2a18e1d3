#!/usr/bin/env bash
# Builds e2e/testhelper (Flux kstatus and Argo CD Lua health checks for the e2e tests) into a
# per-user cache keyed by a hash of its go.mod, go.sum, sources and the Go version; rebuilds only
# when that binary is missing. Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/testhelper"
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
# Shared with build-control-plane.sh: modules and compiled packages are reused across builds.
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"

go_version=$(go env GOVERSION)
# Sorted file list so the key does not depend on directory order.
hash=$(cd "$src" && { printf '%s\n' "$go_version"; LC_ALL=C ls go.mod go.sum *.go | while read -r f; do
  printf '%s\n' "$f"; cat "$f"; done; } | sha256sum | cut -c1-16)
dir="$cache/testhelper-$hash"
bin="$dir/testhelper"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  tmp=$(mktemp -d "$cache/testhelper-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  echo "building the test helper (Flux kstatus, gopher-lua) into $dir" >&2
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$tmp/testhelper" .) >&2
  # Rename into place so that a concurrent caller never runs a half-written binary.
  mv -f "$tmp/testhelper" "$bin"
  echo "test helper built in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin"
