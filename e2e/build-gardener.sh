#!/usr/bin/env bash
# Builds gardener-apiserver from the Go module pinned in e2e/gardener/go.mod into a per-user cache
# (~/.cache/hap-operator/gardener-<version>-<go>/gardener-apiserver), only when it is missing, with
# gardener's version ldflags so `--version` and /version are right. A module of its own: adding
# gardener to e2e/tools would move ~60 dependencies under kube-apiserver and etcd.
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/gardener"
version=$(awk '$1=="require" && $2=="github.com/gardener/gardener" {print $3}' "$mod/go.mod" | head -1)
if [ -z "$version" ]; then
  echo "build-gardener: cannot find the github.com/gardener/gardener version in $mod/go.mod" >&2
  exit 1
fi
go_version=$(GOTOOLCHAIN=local go env GOVERSION)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
out="$cache/gardener-$version-$go_version"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOWORK=off
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"
if [ ! -x "$out/gardener-apiserver" ]; then
  mkdir -p "$out"
  tmp=$(mktemp -d "$cache/gardener-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  major=${version#v}; major=${major%%.*}
  minor=${version#v*.}; minor=${minor%%.*}
  start=$(date +%s)
  echo "building gardener-apiserver $version with $go_version into $out (a cold build takes ~8-11 min on 2 cores)" >&2
  (cd "$mod" && go build -trimpath \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor" \
      -o "$tmp/gardener-apiserver" github.com/gardener/gardener/cmd/gardener-apiserver) >&2
  mv -f "$tmp/gardener-apiserver" "$out/gardener-apiserver"
  echo "gardener-apiserver built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out/gardener-apiserver"
