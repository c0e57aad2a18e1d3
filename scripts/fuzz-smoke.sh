#!/usr/bin/env bash
# Fuzz smoke for the rule-entry parsers (fuzz/fuzz_targets/parse_rules.rs), on stable Rust.
# Installs cargo-fuzz from crates.io into the project's tool cache when missing, then fuzzes for
# FUZZ_SECONDS (default 30). libFuzzer exits non-zero on a crash and leaves the input in
# $FUZZ_CACHE/artifacts. RUSTC_BOOTSTRAP lets the stable compiler take the -Z flags cargo-fuzz passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE="${HAP_CACHE:-$HOME/.cache/hap-operator}"
TOOLS="$CACHE/cargo-tools"
FUZZ_CACHE="$CACHE/fuzz"
SECONDS_TO_RUN="${FUZZ_SECONDS:-30}"
export PATH="$TOOLS/bin:$PATH"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz-smoke: installing cargo-fuzz into $TOOLS"
  cargo install --locked cargo-fuzz --root "$TOOLS"
fi

mkdir -p "$FUZZ_CACHE/corpus" "$FUZZ_CACHE/artifacts"
echo "fuzz-smoke: parse_rules for ${SECONDS_TO_RUN}s"
RUSTC_BOOTSTRAP=1 cargo fuzz run parse_rules \
  --fuzz-dir fuzz -s none --target-dir "$FUZZ_CACHE/target" \
  "$FUZZ_CACHE/corpus" fuzz/seeds -- \
  -max_total_time="$SECONDS_TO_RUN" -dict=fuzz/parse_rules.dict \
  -artifact_prefix="$FUZZ_CACHE/artifacts/" -print_final_stats=1
echo "fuzz-smoke: no crash in ${SECONDS_TO_RUN}s"
