#!/usr/bin/env bash
# Rewrites the replace block of e2e/cert-manager/go.mod so that every module both builds use is
# held at the control-plane module's (e2e/tools) version. Go's build cache keys a compiled package
# by its sources and those of all its dependencies: only with identical versions do client-go,
# k8s.io/api, apiserver, grpc, otel … compiled for the control plane serve the cert-manager build
# too, which turns its cold cost from a second Kubernetes-sized compile into cert-manager's own
# packages. Run it after moving either module's versions; `--check` only reports drift (exit 1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/../tools"
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod
eff() { awk 'NF>=2 { v = $2; if ($3 == "=>") v = $NF; print $1, v }' | sort; }
# Listing a whole build list may add go.sum lines: list copies, so a check changes no file.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/tools" "$scratch/cm"
cp "$tools/go.mod" "$tools/go.sum" "$scratch/tools/"
cp "$here/go.mod" "$here/go.sum" "$here/main.go" "$scratch/cm/"
tools_mods=$(cd "$scratch/tools" && go list -m all | eff)
used=$(cd "$scratch/cm" && go list -deps -f '{{if not .Standard}}{{.Module.Path}}{{end}}' . | sort -u)
mine=$(cd "$scratch/cm" && go list -m all | eff)
drift=$(join <(echo "$mine") <(echo "$tools_mods") | awk '$2 != $3 { print $1, $3 }' |
  awk 'NR == FNR { u[$1] = 1; next } ($1 in u)' <(echo "$used") -)
if [ "${1:-}" = "--check" ]; then
  if [ -n "$drift" ]; then
    echo "e2e/cert-manager: modules not at e2e/tools' version (run e2e/cert-manager/pin-to-tools.sh):" >&2
    echo "$drift" >&2
    exit 1
  fi
  exit 0
fi
[ -z "$drift" ] && { echo "e2e/cert-manager already shares every common module version with e2e/tools" >&2; exit 0; }
cd "$here"
while read -r path version; do
  go mod edit -replace "$path=$path@$version"
done <<<"$drift"
go mod tidy
# A replace can pull in other versions; another pass reaches the fixed point (three at most).
pass=${PIN_PASS:-1}
if [ "$pass" -ge 3 ]; then
  echo "pin-to-tools: versions still drift after $pass passes" >&2
  exit 1
fi
rm -rf "$scratch"
PIN_PASS=$((pass + 1)) exec "$0" "$@"
