#!/usr/bin/env bash
# Runs every test against a real control plane it starts and always stops: kube-apiserver with the
# real gardener-apiserver (the one-cluster topology), plus a separate garden (a second control
# plane with gardener-apiserver) for the two-cluster tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$(date +%s)
# containerd, runc, CNI plugins, buildah, musl-tools for the node and the image (apt, once).
scripts/ensure-node-tools.sh
bin=$(e2e/build-control-plane.sh)
export HAP_K8S_BIN="$bin"
# gardener-apiserver from Go modules (e2e/gardener), built once per version, cached.
HAP_GARDENER_APISERVER=$(e2e/build-gardener.sh)
export HAP_GARDENER_APISERVER
# The image that ships (static musl binary, FROM scratch), built reproducibly with buildah; the
# node environment runs it as pods (tests/e2e_pods.rs).
image_start=$(date +%s)
archive=$(scripts/image.sh)
image_s=$(( $(date +%s) - image_start ))
# The test-only attacker image (e2e/testhelper FROM scratch, never shipped) that
# tests/e2e_pods_callers.rs runs as a pod forging admission reviews; cached by source hash.
attacker_start=$(date +%s)
attacker=$(scripts/testhelper-image.sh)
attacker_s=$(( $(date +%s) - attacker_start ))
# Flux kstatus and Argo CD Lua health checks for tests/e2e_gitops.rs; built once per source hash.
HAP_TESTHELPER=$(e2e/build-testhelper.sh)
export HAP_TESTHELPER
# cert-manager's controller and CA injector for tests/e2e_cert_manager.rs (e2e/cert-manager), built
# once per version and source hash, cached; its CRDs lie next to the binary.
cert_manager_start=$(date +%s)
HAP_CERT_MANAGER_BIN=$(e2e/build-cert-manager.sh)
export HAP_CERT_MANAGER_BIN
cert_manager_s=$(( $(date +%s) - cert_manager_start ))
# helm for tests/e2e_deploy.rs (renders deploy/helm); built from Go modules, cached.
HAP_HELM=$(e2e/build-helm.sh)
export HAP_HELM
# promtool and the Prometheus server (Debian's package, unpacked, never installed as a service)
# for tests/alerts.rs (promtool unit tests of every shipped alert) and tests/e2e_prometheus.rs.
HAP_PROMETHEUS_DIR=$(e2e/build-prometheus.sh)
export HAP_PROMETHEUS_DIR
# The Containerfile and Dockerfile are linted (hadolint from PyPI).
scripts/lint-dockerfile.sh
cleanup() {
  e2e/testenv down --node || true
  e2e/testenv down || true
}
trap cleanup EXIT
built=$(date +%s)
e2e/testenv up --garden --gardener
export KUBECONFIG="$root/.testenv/kubeconfig"
# The two-cluster tests find the garden next to KUBECONFIG; the operator's topology is never
# inherited from the caller's environment.
unset HAP_GARDEN_KUBECONFIG
up=$(date +%s)
# A second control plane with a real node, in a network namespace of its own, both images imported.
node_start=$(date +%s)
e2e/testenv up --node --garden --gardener --images "$archive,$attacker"
node_s=$(( $(date +%s) - node_start ))
export HAP_NODE_DIR="$root/.testenv-node"
# Unit, property, CLI and e2e tests in one run; e2e tests share the control plane and isolate
# themselves by namespace, Gardener project and HapConfig name.
cargo test --locked --all-targets --no-fail-fast
if [ -x scripts/fuzz-smoke.sh ]; then
  scripts/fuzz-smoke.sh
fi
echo "make test: all green in $(( $(date +%s) - start ))s (tools $(( built - start ))s, control plane and garden up $(( up - built ))s, image ${image_s}s, attacker image ${attacker_s}s, cert-manager ${cert_manager_s}s, node environment up ${node_s}s)"
