#!/usr/bin/env bash
# `make demo`: a local control plane serving the real Gardener API (gardener-apiserver with the
# landscape's CloudProfiles and the project `kyma`), the CRDs, bindings with their Secrets in the
# project namespace, the seeds' Initial Configuration, the operator, some claims — then
# `kubectl get hap -A` and why the pending claims wait.
# `scripts/demo.sh down` stops the demo operator (the Makefile then stops the control plane).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
pidfile="$root/.testenv/run/hap-demo.pid"
if [ "${1:-}" = down ]; then
  if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
  exit 0
fi
bin=$(e2e/build-control-plane.sh)
export HAP_K8S_BIN="$bin" KUBECONFIG="$root/.testenv/kubeconfig"
kubectl="$bin/kubectl"
hap="${CARGO_TARGET_DIR:-$HOME/.cache/hap-operator/target}/debug/hap"
e2e/testenv up >/dev/null
"$kubectl" apply --server-side -f crds/ >/dev/null
# kubectl wait fails at once (instead of waiting) on a CRD created a moment ago that has no
# conditions yet, so it is retried; the last try shows its error if the CRDs never settle.
crds="crd/hapconfigs.accountpool.io crd/accountclaims.accountpool.io"
for _ in $(seq 100); do
  "$kubectl" wait --for=condition=Established $crds --timeout=60s >/dev/null 2>&1 && break
  sleep 0.2
done
"$kubectl" wait --for=condition=Established $crds --timeout=60s >/dev/null
"$kubectl" apply -f examples/demo/00-namespaces.yaml >/dev/null
"$kubectl" apply -f examples/demo/10-credentialsbindings.yaml >/dev/null
"$kubectl" apply -f examples/demo/20-hapconfig.yaml >/dev/null
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "demo operator already running (pid $(cat "$pidfile"))"
else
  mkdir -p .testenv/logs .testenv/run
  # Plain /metrics on loopback for the demo; the shipped Deployment serves it over HTTPS to tokens.
  nohup "$hap" run --leader-elect=false --http-addr 127.0.0.1:18080 --metrics-secure=false >.testenv/logs/hap-operator.log 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    curl -fsS http://127.0.0.1:18080/readyz >/dev/null 2>&1 && break
    sleep 0.2
  done
fi
"$kubectl" apply -f examples/demo/30-accountclaims.yaml >/dev/null
# Every claim decided (Bound, or Pending with a reason), whatever the outcome.
"$kubectl" wait --for=condition=Ready hapconfig/default --timeout=60s >/dev/null
"$kubectl" wait --for=jsonpath='{.status.phase}' aclaim --all -n provisioning --timeout=60s >/dev/null
echo "\$ kubectl get hap -A"
"$kubectl" get hap -A
pending='{range .items[?(@.status.phase=="Pending")]}{.metadata.name}: {.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}{end}'
echo
echo "\$ kubectl get aclaim -n provisioning -o jsonpath='<Pending claims: Ready reason and message>'"
"$kubectl" get aclaim -n provisioning -o jsonpath="$pending"
cat <<TXT

The operator keeps running (log: .testenv/logs/hap-operator.log, metrics: http://127.0.0.1:18080/metrics).
Try:  export KUBECONFIG=$KUBECONFIG; alias kubectl=$kubectl
      kubectl get credentialsbindings -n garden-kyma -L tenantName
      kubectl get hapconfig default -o yaml
      kubectl get shoots,cloudprofiles -A          # the real Gardener API
Stop: make demo-down
TXT
