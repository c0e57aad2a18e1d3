#!/usr/bin/env bash
# scripts/bench.sh summary LOG…: the `BENCH-ROW` lines of several runs of one benchmark as one
# row per table and first cell (the size or the phase), the n-th such row of each log together
# (a run prints one phase at several rates in the same order). Each number is the median of the runs,
# followed by its range `[min–max]` where the runs differ; the first cell says how many runs.
# The rows print as `BENCH-ROW …` again, so `scripts/bench.sh report` can take them.
#   scripts/bench.sh summary run1.log run2.log run3.log
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/bench.sh summary LOG..." >&2; exit 2; }
for log in "$@"; do
  [ -r "$log" ] || { echo "bench summary: cannot read $log" >&2; exit 2; }
done
awk -F'|' '
  # The numbers of a cell go to num[], its text with each number as \001 to the return value.
  function split_cell(cell, num,   shape, k) {
    shape = ""; k = 0
    while (match(cell, /-?[0-9]+(\.[0-9]+)?/)) {
      shape = shape substr(cell, 1, RSTART - 1) "\001"
      num[++k] = substr(cell, RSTART, RLENGTH)
      cell = substr(cell, RSTART + RLENGTH)
    }
    num[0] = k
    return shape cell
  }
  function decimals(s,   d) { d = index(s, "."); return d ? length(s) - d : 0 }
  # The median of v[1..n] (sorted here), with the decimals of the first run.
  function summarise(v, n, first,   i, j, t, m, fmt) {
    for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] + 0 > t + 0; j--) v[j + 1] = v[j]; v[j + 1] = t }
    m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    fmt = "%." decimals(first) "f"
    if (v[1] + 0 == v[n] + 0) return first
    return sprintf(fmt, m) " [" sprintf(fmt, v[1]) "–" sprintf(fmt, v[n]) "]"
  }
  FNR == 1 { delete seen }
  /^BENCH-ROW [a-z-]+ \|/ {
    split($1, head, " "); table = head[2]; label = $2; gsub(/^ +| +$/, "", label)
    key = table SUBSEP label SUBSEP (++seen[table SUBSEP label])
    if (!(key in runs)) { order[++keys] = key; cols[key] = NF - 1 }
    r = ++runs[key]
    for (c = 3; c < NF; c++) {
      s = split_cell($c, num)
      if (r == 1) shape[key, c] = s
      else if (shape[key, c] != s) varies[key, c] = 1
      for (k = 1; k <= num[0]; k++) val[key, c, k, r] = num[k]
      count[key, c] = num[0]
    }
  }
  END {
    for (i = 1; i <= keys; i++) {
      key = order[i]; split(key, kl, SUBSEP); n = runs[key]
      line = "BENCH-ROW " kl[1] " | " kl[2] ", median of " n (n == 1 ? " run" : " runs") " |"
      for (c = 3; c <= cols[key]; c++) {
        s = shape[key, c]
        if ((key, c) in varies) {
          line = line " (the runs differ in form) |"; continue
        }
        out = ""
        for (k = 1; k <= count[key, c]; k++) {
          for (r = 1; r <= n; r++) v[r] = val[key, c, k, r]
          p = index(s, "\001")
          out = out substr(s, 1, p - 1) summarise(v, n, val[key, c, k, 1])
          s = substr(s, p + 1)
        }
        line = line out s "|"
      }
      print line
    }
  }' "$@"
