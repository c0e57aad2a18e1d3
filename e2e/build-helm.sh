#!/usr/bin/env bash
# Builds the helm CLI pinned in e2e/helm/go.mod into a per-user cache
# (~/.cache/hap-operator/helm-<version>-<go>/helm), only when it is missing. No package registry
# ships a Linux helm binary (checked: PyPI, npm, Debian), so it is compiled from the Go module
# proxy, in a Go module of its own: e2e/tools (the control plane) must not change for it.
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/helm"
version=$(awk '$1=="helm.sh/helm/v4" {print $2} $1=="require" && $2=="helm.sh/helm/v4" {print $3}' "$mod/go.mod" | head -1)
if [ -z "$version" ]; then
  echo "build-helm: cannot find the helm.sh/helm/v4 version in $mod/go.mod" >&2
  exit 1
fi
go_version=$(GOTOOLCHAIN=local go env GOVERSION)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
out="$cache/helm-$version-$go_version"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOWORK=off
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"
if [ ! -x "$out/helm" ]; then
  mkdir -p "$out"
  tmp=$(mktemp -d "$cache/helm-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  echo "building helm $version with $go_version into $out (a cold build takes ~4-5 min on 2 cores)" >&2
  (cd "$mod" && go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
      -o "$tmp/helm" helm.sh/helm/v4/cmd/helm) >&2
  mv -f "$tmp/helm" "$out/helm"
  echo "helm built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out/helm"
