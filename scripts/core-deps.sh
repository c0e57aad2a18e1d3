#!/usr/bin/env bash
# The core crate (crates/hap-core) decides over plain data and cannot call an API server: no
# client, runtime or HTTP crate may appear in its resolved dependency tree. Run by `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Whole families: tokio-util, hyper-rustls, tower-http, h2 (HTTP/2) count as well.
forbidden='(kube-client|kube-runtime|tokio|hyper|axum|tower|reqwest|h2)(-[a-z0-9-]+)?'
tree=$(cargo tree --locked -p hap-core -e normal,build --prefix none --format '{p}')
bad=$(grep -E "^($forbidden) " <<<"$tree" | sort -u || true)
if [ -n "$bad" ]; then
  echo "core-deps: crates/hap-core depends on client crates (cargo tree -p hap-core -i <crate> shows the path):" >&2
  echo "$bad" >&2
  exit 1
fi
echo "core-deps: crates/hap-core has $(sort -u <<<"$tree" | wc -l) crates in its tree, no client among them" >&2
