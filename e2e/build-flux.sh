#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller (the versions pinned in e2e/flux/go.mod)
# and hap-gitserver (e2e/flux/gitserver: Flux's own test Git server, HTTP on loopback) into a
# per-user cache, ~/.cache/hap-operator/flux-<source-controller>-<kustomize-controller>-<go>/<hash>/,
# only when missing; the hash covers e2e/flux's go.mod, go.sum and sources. Copies the controllers'
# CRDs (config/crd/bases of each module, as the module proxy serves it) into crds/ beside them.
# Prints that directory on stdout; progress goes to stderr.
#
# A module of its own, so the control plane's module (e2e/tools) never moves for it. Flux v1.10
# needs Go 1.27 and modules the module proxy here refuses; v1.9 builds with the local Go (see
# e2e/flux/go.mod), so nothing here switches toolchains.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/flux"
version_of() {
  awk -v m="$1" '($1=="require" && $2==m) {print $3} ($1==m && $2 ~ /^v/) {print $2}' "$mod/go.mod" | head -1
}
sc=$(version_of github.com/fluxcd/source-controller)
kc=$(version_of github.com/fluxcd/kustomize-controller)
if [ -z "$sc" ] || [ -z "$kc" ]; then
  echo "build-flux: cannot find the source-controller or kustomize-controller version in $mod/go.mod" >&2
  exit 1
fi
go_version=$(GOTOOLCHAIN=local go env GOVERSION)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
src=$(cd "$mod" && LC_ALL=C find go.mod go.sum gitserver -type f | sort | while read -r f; do
  printf '%s\n' "$f"; cat "$f"; done | sha256sum | cut -c1-12)
out="$cache/flux-$sc-$kc-$go_version/$src"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOWORK=off
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"
bins=(source-controller kustomize-controller hap-gitserver)
missing=
for b in "${bins[@]}"; do [ -x "$out/$b" ] || missing=1; done
[ -d "$out/crds" ] || missing=1
if [ -n "$missing" ]; then
  mkdir -p "$out"
  tmp=$(mktemp -d "$cache/flux-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  # The downloads wait on the network, not on the cores: many at a time.
  (cd "$mod" && GOMAXPROCS=16 go mod download) >&2
  echo "Flux modules present in $(( $(date +%s) - start ))s" >&2
  echo "building Flux source-controller $sc, kustomize-controller $kc and hap-gitserver with $go_version into $out" >&2
  # One go build for the three binaries so they share compiled packages. No -trimpath, the flags of
  # build-control-plane.sh, so packages both builds use come from the build cache.
  (cd "$mod" && go build -ldflags "-s -w" -o "$tmp/" \
      github.com/fluxcd/source-controller github.com/fluxcd/kustomize-controller ./gitserver) >&2
  mv -f "$tmp/gitserver" "$tmp/hap-gitserver"
  mkdir -p "$tmp/crds"
  for m in source-controller kustomize-controller; do
    moddir=$(cd "$mod" && go list -m -f '{{.Dir}}' "github.com/fluxcd/$m")
    cp "$moddir"/config/crd/bases/*.yaml "$tmp/crds/"
  done
  chmod u+w "$tmp/crds"/*
  rm -rf "$out/crds"
  mv -f "$tmp/crds" "$out/crds"
  # Rename into place so that a concurrent caller never runs a half-written binary.
  for b in "${bins[@]}"; do mv -f "$tmp/$b" "$out/$b"; done
  echo "Flux built in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
