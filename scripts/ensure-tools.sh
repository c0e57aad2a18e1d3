#!/usr/bin/env bash
# Installs what `make test` and `make demo` need and the machine lacks. Idempotent.
set -euo pipefail
missing=()
command -v cargo >/dev/null || missing+=("cargo (Rust toolchain, https://rustup.rs)")
command -v go >/dev/null || missing+=("go (Go >= 1.25 toolchain)")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'missing: %s\n' "${missing[@]}" >&2
  exit 1
fi
# rustfmt and clippy ship as rustup components.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  if command -v rustup >/dev/null; then
    rustup component add rustfmt clippy >&2
  else
    echo "cargo fmt / cargo clippy are missing and rustup is not available to add them" >&2
    exit 1
  fi
fi
