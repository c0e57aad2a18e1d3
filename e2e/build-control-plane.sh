#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and
# etcd from the Go modules pinned in
# e2e/tools/go.mod into a per-user cache keyed by the Kubernetes and Go versions (rebuilt only
# when missing), and the launcher (testenv) into a directory keyed by its source, with links to
# those binaries (cheap: the Go build cache makes that a link). Prints that directory on stdout
# (the binaries and the launcher are in it); progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/tools"
k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$tools/go.mod" | head -1)
if [ -z "$k8s_version" ]; then
  echo "build-control-plane: cannot find the k8s.io/kubernetes version in $tools/go.mod" >&2
  exit 1
fi
go_version=$(go env GOVERSION)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
bin="$cache/k8s-$k8s_version-$go_version/bin"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
# Module and build caches live under $HOME/.cache so repeated runs reuse them.
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
export GOCACHE="${GOCACHE:-$cache/gobuild}"

bins="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd"
need=0
for b in $bins; do
  [ -x "$bin/$b" ] || need=1
done
if [ "$need" = 1 ]; then
  mkdir -p "$bin"
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  major=${k8s_version#v}; major=${major%%.*}
  minor=${k8s_version#v*.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  done
  start=$(date +%s)
  echo "building control plane $k8s_version with $go_version into $bin (a cold build takes ~7 min on 2 cores)" >&2
  # One go build for all binaries so they share compiled packages. No -trimpath (here, for the
  # launcher and in build-cert-manager.sh): with it, a package of a replaced module is compiled
  # under the *required* version's name, so cert-manager's copies pinned to these versions would
  # miss the Go build cache; without it both builds name them by their one module-cache path.
  (cd "$tools" && go build -ldflags "$ldflags" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kube-proxy \
      k8s.io/kubernetes/cmd/kubectl \
      go.etcd.io/etcd/server/v3) >&2
  # A module path ending in /vN names its binary after the element before it.
  if [ -e "$tmp/v3" ]; then mv "$tmp/v3" "$tmp/etcd"; else mv "$tmp/server" "$tmp/etcd"; fi
  for b in $bins; do mv -f "$tmp/$b" "$bin/$b"; done
  echo "control plane built in $(( $(date +%s) - start ))s" >&2
fi
# The node's sandbox ("pause") binary, compiled from the kubernetes module's own pause.c,
# static with musl-gcc (scripts/ensure-node-tools.sh node installs musl-tools); the launcher
# wraps it in an OCI image. Only `testenv up --node` needs it.
if [ ! -x "$bin/pause" ] && command -v musl-gcc >/dev/null; then
  pause_dir="$(cd "$tools" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause"
  pause_tag=$(sed -n 's/^TAG ?= *//p' "$pause_dir/Makefile")
  musl-gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag-hap" -o "$bin/pause.tmp" "$pause_dir/linux/pause.c" >&2
  mv -f "$bin/pause.tmp" "$bin/pause"
fi
# The launcher is built per source version, next to links to the shared binaries: worktrees with
# different launcher sources (several engineers, branches) must never overwrite each other's
# launcher in the shared bin directory. Same sources share one directory (the build is atomic).
src_hash=$( (cd "$tools" && cat go.mod go.sum cmd/testenv/*.go && echo "$go_version") | sha256sum | cut -c1-16)
launcher="$cache/k8s-$k8s_version-$go_version/launcher-$src_hash"
if [ ! -x "$launcher/testenv" ]; then
  mkdir -p "$launcher"
  for b in $bins; do ln -sfn "$bin/$b" "$launcher/$b"; done
  tmp_launcher=$(mktemp "$launcher/.testenv.XXXXXX")
  (cd "$tools" && go build -o "$tmp_launcher" ./cmd/testenv) >&2
  mv -f "$tmp_launcher" "$launcher/testenv"
fi
if [ -x "$bin/pause" ]; then ln -sfn "$bin/pause" "$launcher/pause"; fi
echo "$launcher"
