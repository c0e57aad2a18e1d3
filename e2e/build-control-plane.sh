#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl and etcd from the Go modules pinned in
# e2e/tools/go.mod, into a per-user cache keyed by the Kubernetes and Go versions. Rebuilds only
# when a binary is missing. Prints the bin directory on stdout.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/tools"
k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" {print $2}' "$tools/go.mod" | head -1)
go_version=$(go env GOVERSION)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
bin="$cache/k8s-$k8s_version-$go_version/bin"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
# Module and build caches live under $HOME/.cache so CI reuses them between runs.
export GOMODCACHE="${GOMODCACHE:-$HOME/.cache/hap-operator/gomod}"
export GOCACHE="${GOCACHE:-$HOME/.cache/hap-operator/gobuild}"

need=0
for b in kube-apiserver kube-controller-manager kubectl etcd testhelper; do
  [ -x "$bin/$b" ] || need=1
done
if [ "$need" = 1 ]; then
  mkdir -p "$bin"
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  major=${k8s_version#v}; major=${major%%.*}
  minor=${k8s_version#v*.}; minor=${minor%%.*}
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  start=$(date +%s)
  echo "building control plane $k8s_version with $go_version into $bin (cold builds take a while)" >&2
  (cd "$tools" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kubectl \
      go.etcd.io/etcd/server/v3 \
      ./cmd/testhelper) >&2
  mv "$tmp/v3" "$tmp/etcd" 2>/dev/null || mv "$tmp/server" "$tmp/etcd"
  for b in kube-apiserver kube-controller-manager kubectl etcd testhelper; do mv -f "$tmp/$b" "$bin/$b"; done
  echo "control plane built in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin"
