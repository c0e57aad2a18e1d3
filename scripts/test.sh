#!/usr/bin/env bash
# Runs every test against a real control plane it starts and always stops.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$(date +%s)
bin=$(e2e/build-control-plane.sh)
export HAP_K8S_BIN="$bin"
# Flux kstatus and Argo CD Lua health checks for tests/e2e_gitops.rs; built once per source hash.
HAP_TESTHELPER=$(e2e/build-testhelper.sh)
export HAP_TESTHELPER
# helm for tests/e2e_deploy.rs (renders deploy/helm); built from Go modules, cached.
HAP_HELM=$(e2e/build-helm.sh)
export HAP_HELM
# The Dockerfile is linted (hadolint from PyPI); no container engine here to build it.
scripts/lint-dockerfile.sh
cleanup() { e2e/testenv down || true; }
trap cleanup EXIT
e2e/testenv up
export KUBECONFIG="$root/.testenv/kubeconfig"
# Unit, property, CLI and e2e tests in one run; e2e tests share the control plane and isolate
# themselves by namespace and HapConfig name.
cargo test --locked --all-targets --no-fail-fast
if [ -x scripts/fuzz-smoke.sh ]; then
  scripts/fuzz-smoke.sh
fi
echo "make test: all green in $(( $(date +%s) - start ))s"
