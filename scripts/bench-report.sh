#!/usr/bin/env bash
# scripts/bench.sh report [LOG]: benchmark output rows into BENCHMARKS.md, then its headline table
# into README.md. Rows are `BENCH-ROW <table> | cell | … |`; each lands at the end of the table
# that follows `<!-- rows:<table> -->`, with a last cell naming the day and the commit measured.
# Without LOG only the README is brought in line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log=${1:-}
if [ -n "$log" ]; then
  [ -r "$log" ] || { echo "bench report: cannot read $log" >&2; exit 2; }
  stamp="$(date -u +%F) $(git rev-parse --short HEAD)"
  grep -E '^BENCH-ROW [a-z-]+ \|' "$log" > /tmp/bench-rows.$$ || {
    echo "bench report: no BENCH-ROW line in $log" >&2; exit 2; }
  while read -r _ table _; do
    grep -q "^<!-- rows:$table -->\$" BENCHMARKS.md || {
      echo "bench report: BENCHMARKS.md has no <!-- rows:$table --> table for a row of $log" >&2
      exit 2; }
  done < /tmp/bench-rows.$$
  awk -v rows=/tmp/bench-rows.$$ -v stamp="$stamp" '
    BEGIN { while ((getline l < rows) > 0) { split(l, f, " "); t = f[2]; sub(/^BENCH-ROW [a-z-]+ /, "", l); add[t] = add[t] l " " stamp " |\n" } }
    function flush() { if (open != "" ) { printf "%s", add[open]; open = "" } }
    /^<!-- rows:[a-z-]+ -->$/ { flush(); t = $0; sub(/^<!-- rows:/, "", t); sub(/ -->$/, "", t); pending = t; print; next }
    pending != "" && /^\|/ { open = pending; pending = ""; print; next }
    open != "" && !/^\|/ { flush() }
    { print }
    END { flush() }
  ' BENCHMARKS.md > BENCHMARKS.md.new
  mv BENCHMARKS.md.new BENCHMARKS.md
  rm -f /tmp/bench-rows.$$
  echo "bench report: $(wc -l < "$log" | tr -d ' ') lines read; rows added to BENCHMARKS.md"
fi
block() { awk '/^<!-- headline:begin -->$/ {on=1} on {print} /^<!-- headline:end -->$/ {on=0}' "$1"; }
[ -n "$(block BENCHMARKS.md)" ] || { echo "bench report: BENCHMARKS.md has no headline block" >&2; exit 2; }
block BENCHMARKS.md > /tmp/bench-headline.$$
awk -v src=/tmp/bench-headline.$$ '
  /^<!-- headline:begin -->$/ { while ((getline l < src) > 0) print l; skip = 1; next }
  skip && /^<!-- headline:end -->$/ { skip = 0; next }
  !skip { print }
' README.md > README.md.new
mv README.md.new README.md
rm -f /tmp/bench-headline.$$
echo "bench report: README.md's performance table is BENCHMARKS.md's headline table"
