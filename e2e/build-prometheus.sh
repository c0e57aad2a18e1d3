#!/usr/bin/env bash
# Unpacks promtool and the Prometheus server from Debian's `prometheus` package into a per-user
# cache (~/.cache/hap-operator/prometheus-<version>/), only when missing. The package is fetched
# with `apt-get download` and unpacked with `dpkg -x`, never installed: installing it would start
# a Prometheus service on this machine. Prints the cache directory (holding `promtool` and
# `prometheus`) on stdout; progress goes to stderr.
set -euo pipefail
cache="${HAP_CACHE_DIR:-$HOME/.cache/hap-operator}"
version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  echo "build-prometheus: apt knows no 'prometheus' package (run apt-get update?)" >&2
  exit 1
fi
out="$cache/prometheus-${version//[^A-Za-z0-9.+-]/_}"
if [ ! -x "$out/promtool" ] || [ ! -x "$out/prometheus" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/prometheus-fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching Debian's prometheus $version into $out" >&2
  (cd "$tmp" && apt-get download "prometheus=$version" >&2 && dpkg -x prometheus_*.deb root)
  mkdir -p "$out"
  mv -f "$tmp/root/usr/bin/promtool" "$tmp/root/usr/bin/prometheus" "$out/"
fi
echo "$out"
