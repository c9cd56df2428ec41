#!/usr/bin/env bash
# Load benchmark of the allocation service (bench/load_bench.cc): concurrent clients acquire and
# release over HTTP against serve on SQLite and on PostgreSQL (a throwaway server on loopback,
# started with scripts/pg_test_server.sh), each beside the raw durable transaction rate of the
# same database.
#
# SQLite runs twice, over plain HTTP and over TLS (as `serve` runs by default), one after the
# other in the same run, and the TLS figure is given as a ratio to the plain one.
#
# Usage: bench/load.sh [--clients N] [--seconds S] [--sqlite-only]
# Ends with one line per store and transport, then the ratio:
#   load <sqlite|postgres> clients=<n> ops_per_s=<x> p50_ms=<y> p99_ms=<z> raw_txn_per_s=<w>
#        transport=<plain|tls>
#   load tls_to_plain=<ratio of the SQLite ops_per_s>
set -euo pipefail
clients=32
seconds=5
sqlite_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --sqlite-only) sqlite_only=1; shift ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
if [[ -f "$build_dir/build.ninja" ]]; then
  cmake --build "$build_dir" --target load_bench >/dev/null
else
  scripts/build.sh "$build_dir" >/dev/null
fi
work=$(mktemp -d)
chmod 755 "$work"  # the PostgreSQL server runs as user postgres
cleanup() {
  [[ -f "$work/pg/data/postmaster.pid" ]] && scripts/pg_test_server.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT
"$build_dir/bench/load_bench" --store sqlite --clients "$clients" --seconds "$seconds" --dir "$work" | tee "$work/sqlite.out"
"$build_dir/bench/load_bench" --store sqlite --clients "$clients" --seconds "$seconds" --dir "$work" --tls | tee "$work/sqlite-tls.out"
if [[ $sqlite_only -eq 0 ]]; then
  url=$(scripts/pg_test_server.sh start "$work/pg" $((20000 + RANDOM % 20000)))
  "$build_dir/bench/load_bench" --store postgres --url "$url" --clients "$clients" --seconds "$seconds" | tee "$work/pg.out"
fi
grep -h '^load ' "$work"/*.out
ops() { sed -n 's/.* ops_per_s=\([0-9.]*\) .*/\1/p' "$1"; }
awk -v tls="$(ops "$work/sqlite-tls.out")" -v plain="$(ops "$work/sqlite.out")" \
  'BEGIN { printf "load tls_to_plain=%.2f\n", (plain > 0 ? tls / plain : 0) }'
