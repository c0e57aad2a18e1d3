#!/usr/bin/env bash
# Runs every test against a real control plane it starts and always stops: kube-apiserver with the
# real gardener-apiserver (the one-cluster topology), plus a separate garden (a second control
# plane with gardener-apiserver) for the two-cluster tests.
#
# On a cold machine the builds are most of the run. They go in two chains side by side: the Go
# tools (modules first, all at once, then the control plane, gardener-apiserver, cert-manager,
# helm, the test helper, Prometheus) in the background, and the Rust ones (fmt, clippy, the
# image, the test build) in the foreground. Alone, each chain leaves a core idle for long
# stretches (module downloads, links, the last crate); together they keep both busy. The suite
# then runs in two lanes: tests/it/chaos.rs starts control planes of its own, so it runs beside the
# tests that share the one started here instead of after them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/hap-test.XXXXXX")
jobs_to_stop=()
cleanup() {
  # Only this shell cleans up: a job killed before it left the shell would run this trap too.
  [ "$BASHPID" = "$$" ] || return 0
  for pgid in "${jobs_to_stop[@]}"; do kill -- "-$pgid" 2>/dev/null || true; done
  e2e/testenv down --node || true
  e2e/testenv down || true
  rm -rf "$work"
}
trap cleanup EXIT
# Runs "$@" as a job of its own process group (so cleanup stops it with its children), output to
# $work/<name>.log; leaves its pid in $job.
background() {
  local name=$1
  shift
  set -m
  (trap - EXIT; exec "$@") </dev/null >"$work/$name.log" 2>&1 &
  job=$!
  set +m
  jobs_to_stop+=("$job")
}
# Waits for a background job, shows its log under a header; returns its exit status.
finish() {
  local name=$1 pid=$2 rc=0
  wait "$pid" || rc=$?
  echo "---- $name (exit $rc) ----"
  cat "$work/$name.log"
  echo "---- end of $name ----"
  return "$rc"
}
# A cold run needs ~22 GB (Flux's modules and build cache added ~4.6 GB); the node environment's kubelet taints its node when the disk is nearly
# full, and the pod tests then wait for pods that are never scheduled.
free_kb=$(df -Pk "$HOME" | awk 'NR==2 {print $4}') || free_kb=0
free_gb=$(( ${free_kb:-0} / 1048576 ))
if [ "$free_gb" -lt 25 ]; then
  echo "make test: WARNING only ${free_gb} GB free; a cold run needs ~22 GB and the pod tests fail when the node's disk is nearly full" >&2
fi
# containerd, runc, CNI plugins, buildah, musl-tools for the node and the image (apt, once).
scripts/ensure-node-tools.sh

go_tools() {
  local out=$1
  e2e/download-go-modules.sh
  e2e/build-control-plane.sh >"$out/k8s"
  # gardener-apiserver from Go modules (e2e/gardener), built once per version, cached.
  e2e/build-gardener.sh >"$out/gardener"
  # cert-manager's controller and CA injector for tests/it/e2e_cert_manager.rs (e2e/cert-manager),
  # built once per version and source hash, cached; its CRDs lie next to the binary.
  e2e/build-cert-manager.sh >"$out/cert-manager"
  # helm for tests/it/e2e_deploy.rs (renders deploy/helm); built from Go modules, cached.
  e2e/build-helm.sh >"$out/helm"
  # Flux kstatus and Argo CD Lua health checks for tests/it/e2e_gitops.rs, and the binary of the
  # attacker image below; built once per source hash.
  e2e/build-testhelper.sh >"$out/testhelper"
  # Flux's source-controller and kustomize-controller, its CRDs and its test Git server for
  # tests/it/e2e_flux.rs (e2e/flux), built once per version and source hash, cached.
  e2e/build-flux.sh >"$out/flux"
  # The Go client module's tests and example provisioner for tests/it/e2e_go_client.rs; built once
  # per source hash.
  e2e/build-goclient.sh >"$out/goclient"
  # promtool and the Prometheus server (Debian's package, unpacked, never installed as a
  # service) for tests/it/alerts.rs and tests/it/e2e_prometheus.rs.
  e2e/build-prometheus.sh >"$out/prometheus"
}
export -f go_tools
go_start=$(date +%s)
background go-tools bash -c 'set -euo pipefail; go_tools "$1"; echo $(( $(date +%s) - $2 )) >"$1/go_s"; echo "Go tools ready in $(cat "$1/go_s")s"' _ "$work" "$go_start"
go_pid=$job

rust_start=$(date +%s)
${MAKE:-make} --no-print-directory lint
# The image that ships (static musl binary, FROM scratch), built reproducibly with buildah; the
# node environment runs it as pods (tests/it/e2e_pods.rs).
image_start=$(date +%s)
archive=$(scripts/image.sh)
image_s=$(( $(date +%s) - image_start ))
cargo test --locked --workspace --all-targets --no-run
# The core crate alone (its own features only), as its unit tests run below.
cargo test --locked -p hap-core --lib --no-run
rust_s=$(( $(date +%s) - rust_start ))
finish go-tools "$go_pid"
go_s=$(cat "$work/go_s")
HAP_K8S_BIN=$(cat "$work/k8s")
HAP_GARDENER_APISERVER=$(cat "$work/gardener")
HAP_CERT_MANAGER_BIN=$(cat "$work/cert-manager")
HAP_HELM=$(cat "$work/helm")
HAP_TESTHELPER=$(cat "$work/testhelper")
HAP_GO_CLIENT_DIR=$(cat "$work/goclient")
HAP_PROMETHEUS_DIR=$(cat "$work/prometheus")
HAP_FLUX_DIR=$(cat "$work/flux")
export HAP_K8S_BIN HAP_GARDENER_APISERVER HAP_CERT_MANAGER_BIN HAP_HELM HAP_TESTHELPER HAP_PROMETHEUS_DIR HAP_FLUX_DIR HAP_GO_CLIENT_DIR
# tests/it/e2e_dist.rs packs this archive into a release (scripts/release.sh) instead of building it again.
export HAP_IMAGE_ARCHIVE="$archive"
# The test-only attacker image (e2e/testhelper FROM scratch, never shipped) that
# tests/it/e2e_pods_callers.rs runs as a pod forging admission reviews; cached by source hash. After
# the image above: both use buildah's storage.
attacker=$(scripts/testhelper-image.sh)
# The Containerfile and Dockerfile are linted (hadolint from PyPI).
scripts/lint-dockerfile.sh
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
# Unit, property, CLI and e2e tests, in two lanes. The integration tests are one binary
# (tests/it), run one module at a time as when each was a binary of its own; the tests that
# share the control plane above isolate themselves by namespace, Gardener project and HapConfig
# name. The chaos module brings its own control planes and runs beside the rest.
own_planes=chaos
modules=()
while read -r m; do
  [ "$m" = "$own_planes" ] || modules+=("$m")
done < <(sed -n 's/^mod \([a-z0-9_]*\);$/\1/p' tests/it/main.rs)
suite_start=$(date +%s)
background "$own_planes" cargo test --locked --test it -- "$own_planes::"
chaos_pid=$job
rc=0
cargo test --locked --no-fail-fast -p hap-core --lib || rc=$?
cargo test --locked --no-fail-fast --workspace --exclude hap-core --lib --bins --examples --benches || rc=$?
for m in "${modules[@]}"; do
  echo "tests/it: $m"
  cargo test --locked --test it -- "$m::" || rc=$?
done
finish "$own_planes" "$chaos_pid" || rc=$?
suite_s=$(( $(date +%s) - suite_start ))
if [ "$rc" != 0 ]; then
  echo "make test: tests failed (see the 'FAILED' and 'failures:' lines above)" >&2
  exit "$rc"
fi
if [ -x scripts/fuzz-smoke.sh ]; then
  scripts/fuzz-smoke.sh
fi
echo "make test: all green in $(( $(date +%s) - start ))s (builds $(( built - start ))s: the Go tools ${go_s}s beside fmt, clippy, the image (${image_s}s) and the test build (${rust_s}s together); control plane and garden up $(( up - built ))s, node environment up ${node_s}s, suite ${suite_s}s in two lanes)"
