#!/usr/bin/env bash
# Replays the README walk-through on a fresh local control plane (with the real gardener-apiserver
# and the landscape's project `kyma`) and prints the transcript: bindings, a HapConfig, claims,
# their status, then an invalid rule change.
# Usage: scripts/walkthrough.sh > transcript.txt   (stops its control plane at the end)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin=$(e2e/build-control-plane.sh)
gardener=$(e2e/build-gardener.sh)
dir=$(mktemp -d)
hapbin="${CARGO_TARGET_DIR:-$HOME/.cache/hap-operator/target}/debug/hap"
HAP_K8S_BIN="$bin" HAP_GARDENER_APISERVER="$gardener" "$bin/testenv" up --dir "$dir" >/dev/null 2>&1
export KUBECONFIG="$dir/kubeconfig" PATH="$bin:$PATH"
kubectl apply --server-side -f crds/ >/dev/null
# kubectl wait fails at once on a CRD with no conditions yet (created a moment ago): retried.
crds="crd/hapconfigs.accountpool.io crd/accountclaims.accountpool.io"
for _ in $(seq 100); do
  kubectl wait --for=condition=Established $crds --timeout=60s >/dev/null 2>&1 && break
  sleep 0.2
done
kubectl wait --for=condition=Established $crds --timeout=60s >/dev/null
"$hapbin" run --leader-elect=false --http-addr 127.0.0.1:0 >"$dir/operator.log" 2>&1 &
operator=$!
trap 'kill $operator 2>/dev/null || true; HAP_K8S_BIN="$bin" "$bin/testenv" down --dir "$dir" >/dev/null' EXIT
cd examples/walkthrough
hap() { "$hapbin" "$@"; }
run() { echo "\$ $*"; eval "$@" 2>&1; echo; }
run kubectl get project kyma
run kubectl create namespace provisioning
run kubectl apply -f bindings.yaml
run hap validate -f hapconfig.yaml
run kubectl apply -f hapconfig.yaml
kubectl wait --for=condition=RulesValid hapconfig/default --timeout=30s >/dev/null; sleep 2
run kubectl get hapconfig
run "kubectl get hapconfig default -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{\"\\n\"}{end}'"
run kubectl apply -f claims.yaml
kubectl wait --for=jsonpath='{.status.phase}' aclaim --all -n provisioning --timeout=30s >/dev/null; sleep 1
run kubectl get accountclaims -n provisioning
run kubectl get credentialsbindings -n garden-kyma -L tenantName
run "kubectl get accountclaim shoot-g1 -n provisioning -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].message}'"
echo
run "kubectl patch hapconfig default --type merge -p '{\"spec\":{\"rules\":[\"aws(euAccess=*)\",\"trial(shared)\",\"gcp\",\"gcp(PR=)\"]}}'"
sleep 2
run kubectl get hapconfig default -o wide
run "kubectl get hapconfig default -o jsonpath='{.status.conditions[?(@.type==\"Stalled\")].message}'"
