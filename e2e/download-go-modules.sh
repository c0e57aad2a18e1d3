#!/usr/bin/env bash
# Downloads the modules of every Go build the tests use (e2e/tools, e2e/gardener,
# e2e/cert-manager, e2e/helm, e2e/testhelper, e2e/flux, clients/go) into the shared module cache, all modules side by
# side. A cold `go build` fetches its modules a couple at a time while the compiler waits, which
# cost ~9 of the 16 minutes of the control plane's cold build; scripts/test.sh runs this while
# clippy compiles. With a warm cache it fetches nothing and takes seconds. Progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
# The same settings as the build scripts, so they find what this fetched.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off
export GOMODCACHE="${GOMODCACHE:-$cache/gomod}"
# `go mod download` fetches GOMAXPROCS modules at a time; the work is waiting on the network, not
# on the two cores.
export GOMAXPROCS=16
start=$(date +%s)
pids=()
for m in tools gardener cert-manager helm testhelper flux ../clients/go; do
  (cd "$here/$m" && go mod download) &
  pids+=("$!")
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=1
done
if [ "$rc" != 0 ]; then
  echo "download-go-modules: a 'go mod download' above failed (is GOPROXY reachable?)" >&2
  exit 1
fi
echo "Go modules of the test tools present in $(( $(date +%s) - start ))s" >&2
