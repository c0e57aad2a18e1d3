#!/usr/bin/env bash
# make bench: the criterion microbenchmarks (rule evaluation, inventory index and selection) and
# the load benchmark (examples/load/) against a control plane of its own. Prints figures and the
# commands to reproduce them; asserts nothing about time. Takes ~10 minutes on 2 cores.
#   scripts/bench.sh          everything
#   scripts/bench.sh micro    criterion only
#   scripts/bench.sh load     the load benchmark only (HAP_BENCH_* variables: see examples/load/main.rs)
#   scripts/bench.sh scale    its phase 4 only (cost against landscape size; set HAP_BENCH_SHOOTS,
#                             HAP_BENCH_BINDINGS, HAP_BENCH_SCALE_CLAIMS for the size)
#   scripts/bench.sh takeover its phase 5 only (a backlog decided by a fresh operator, beside a
#                             no-logic client; HAP_BENCH_TAKEOVER_NEW/_REUSE/_RELEASE for the size)
#   scripts/bench.sh churn    phase 4 then its phase 6: an hour of claims created and deleted at a
#                             steady rate on that landscape (HAP_BENCH_CHURN_*), memory sampled
#   scripts/bench.sh admission  admission latency of request sources (examples/admission.rs)
#   scripts/bench.sh summary LOG…  one row per table and size from several runs' BENCH-ROW lines:
#                             each number the median, with its range where the runs differ
#   HAP_BENCH_RUNS=3 scripts/bench.sh scale|takeover|churn|admission|load  runs it three times,
#                             each run's output in a log of its own, then prints that summary
#   scripts/bench.sh report LOG  puts every `BENCH-ROW <table> | … |` line of a benchmark's output
#                             into BENCHMARKS.md's table marked `<!-- rows:<table> -->` (with the
#                             date and commit), then copies BENCHMARKS.md's headline table into
#                             the README (a test fails when the two differ)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
what=${1:-all}
if [ "$what" = report ]; then
  exec scripts/bench-report.sh "${2:-}"
fi
if [ "$what" = summary ]; then
  shift
  exec scripts/bench-summary.sh "$@"
fi
target=${CARGO_TARGET_DIR:-$root/target}
runs=${HAP_BENCH_RUNS:-1}
# Runs an example HAP_BENCH_RUNS times; with more than one, each run's output is kept in a log
# and the runs are summarised (median and range of every figure).
run_example() {
  if [ "$runs" -le 1 ]; then
    "$target/release/examples/$1"
    return
  fi
  local logs=() r log
  for r in $(seq 1 "$runs"); do
    log=$(mktemp -t "hap-bench-$1-run$r-XXXX.log")
    echo "== run $r of $runs (output also in $log) =="
    "$target/release/examples/$1" 2>&1 | tee "$log"
    logs+=("$log")
  done
  echo "== $runs runs: median [range] of each figure (scripts/bench.sh summary ${logs[*]}) =="
  scripts/bench-summary.sh "${logs[@]}"
}
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), kernel $(uname -r)"
echo "toolchain: $(rustc --version), $(go version | cut -d' ' -f3)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$what" = all ] || [ "$what" = micro ]; then
  echo "== microbenchmarks: cargo bench --bench rules --bench selection =="
  cargo bench --locked --bench rules --bench selection
fi
if [ "$what" = scale ]; then
  export HAP_BENCH_ROUNDS=0 HAP_BENCH_PACED_CLAIMS=0
  what=load
fi
if [ "$what" = churn ]; then
  export HAP_BENCH_ROUNDS=0 HAP_BENCH_PACED_CLAIMS=0 HAP_BENCH_CHURN_S=${HAP_BENCH_CHURN_S:-3600}
  what=load
fi
if [ "$what" = takeover ]; then
  export HAP_BENCH_ROUNDS=0 HAP_BENCH_PACED_CLAIMS=0 HAP_BENCH_SCALE=0
  what=load
fi
if [ "$what" = all ] || [ "$what" = load ]; then
  HAP_K8S_BIN=$(e2e/build-control-plane.sh)
  HAP_GARDENER_APISERVER=$(e2e/build-gardener.sh)
  export HAP_K8S_BIN HAP_GARDENER_APISERVER
  echo "== load benchmark: cargo build --release --bin hap --example load && $target/release/examples/load =="
  cargo build --locked --release --bin hap --example load
  run_example load
fi
if [ "$what" = all ] || [ "$what" = admission ]; then
  HAP_K8S_BIN=${HAP_K8S_BIN:-$(e2e/build-control-plane.sh)}
  HAP_GARDENER_APISERVER=${HAP_GARDENER_APISERVER:-$(e2e/build-gardener.sh)}
  export HAP_K8S_BIN HAP_GARDENER_APISERVER
  echo "== admission benchmark: cargo build --release --bin hap --example admission && $target/release/examples/admission =="
  cargo build --locked --release --bin hap --example admission
  run_example admission
fi
