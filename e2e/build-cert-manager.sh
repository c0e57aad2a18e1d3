#!/usr/bin/env bash
# Builds cert-manager's controller and CA injector (one binary, hap-cert-manager, from
# e2e/cert-manager/main.go and the github.com/cert-manager/cert-manager module pinned in its go.mod)
# into a per-user cache (~/.cache/hap-operator/cert-manager-<version>-<go>/), only when it is
# missing. A module of its own, so it never moves the control-plane module (e2e/tools); its
# shared dependencies are pinned to e2e/tools' versions (cert-manager/pin-to-tools.sh) so the
# packages compiled for the control plane serve this build from the Go build cache — the flags
# below must stay those of build-control-plane.sh for that. Also copies the module's CRDs
# (deploy/crds) next to the binary.
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/cert-manager"
version=$(awk -v m=github.com/cert-manager/cert-manager '($1=="require" && $2==m) {print $3} ($1==m) {print $2}' "$mod/go.mod" | head -1)
if [ -z "$version" ]; then
  echo "build-cert-manager: cannot find the github.com/cert-manager/cert-manager version in $mod/go.mod" >&2
  exit 1
fi
go_version=$(GOTOOLCHAIN=local go env GOVERSION)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
# The source hash is part of the key: main.go is ours and may change without a new version.
src=$(cat "$mod/main.go" "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-12)
out="$cache/cert-manager-$version-$go_version/$src"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOWORK=off
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"
if [ ! -x "$out/hap-cert-manager" ] || [ ! -d "$out/crds" ]; then
  mkdir -p "$out"
  tmp=$(mktemp -d "$cache/cert-manager-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  # Drift only costs time (the shared packages compile again), so it warns and builds.
  "$mod/pin-to-tools.sh" --check ||
    echo "build-cert-manager: e2e/cert-manager is not pinned to e2e/tools' versions; this build compiles the shared packages again" >&2
  echo "building cert-manager $version (controller, cainjector) with $go_version into $out (cold: ~1 CPU-minute once the control plane is built, ~9 without)" >&2
  (cd "$mod" && go build \
      -ldflags "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version" \
      -o "$tmp/hap-cert-manager" .) >&2
  moddir=$(cd "$mod" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  mkdir -p "$tmp/crds"
  cp "$moddir"/deploy/crds/cert-manager.io_*.yaml "$tmp/crds/"
  chmod u+w "$tmp/crds"/*
  rm -rf "$out/crds"
  mv -f "$tmp/crds" "$out/crds"
  mv -f "$tmp/hap-cert-manager" "$out/hap-cert-manager"
  echo "cert-manager built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out/hap-cert-manager"
