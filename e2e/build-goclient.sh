#!/usr/bin/env bash
# Builds, for tests/it/e2e_go_client.rs, the Go client module's test binaries (clients/go/hap with
# the tag e2e: its unit and end-to-end tests; clients/go/apis/v1alpha1: the drift test of the
# generated types, which reads the CRDs and the generated file at run time) and the example
# provisioner (clients/go/examples/provisioner), after `go vet`, into a per-user cache keyed by
# a hash of the module's go.mod, go.sum, Go sources and the Go version; rebuilds only when they
# are missing. Prints the directory holding hap.test, types.test and provisioner on stdout;
# progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/../clients/go"
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOWORK=off
# Shared with the other Go builds: modules and compiled packages are reused across builds.
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"

go_version=$(go env GOVERSION)
# Sorted file list so the key does not depend on directory order.
hash=$(cd "$src" && { printf '%s\n' "$go_version"; find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort \
  | while read -r f; do printf '%s\n' "$f"; cat "$f"; done; } | sha256sum | cut -c1-16)
dir="$cache/goclient-$hash"
if [ ! -x "$dir/hap.test" ] || [ ! -x "$dir/types.test" ] || [ ! -x "$dir/provisioner" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/goclient-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  echo "building the Go client's e2e tests and example provisioner into $dir" >&2
  (cd "$src" && go vet -tags e2e ./... \
    && go test -c -tags e2e -trimpath -o "$tmp/hap.test" ./hap \
    && go test -c -trimpath -o "$tmp/types.test" ./apis/v1alpha1 \
    && go build -trimpath -ldflags "-s -w" -o "$tmp/provisioner" ./examples/provisioner) >&2
  # Rename into place so that a concurrent caller never runs a half-written binary.
  rm -rf "$dir"
  mv -f "$tmp" "$dir"
  trap - EXIT
  echo "Go client tests built in $(( $(date +%s) - start ))s" >&2
fi
echo "$dir"
