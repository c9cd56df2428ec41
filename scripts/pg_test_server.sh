#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and benchmarks, on loopback only.
#
#   scripts/pg_test_server.sh start DIR PORT   initdb in DIR (trust auth), listen on 127.0.0.1:PORT
#                                             and a socket in DIR, create database "gpuslice",
#                                             print its URL
#   scripts/pg_test_server.sh stop DIR         stop it (the data in DIR stays; remove DIR yourself)
#
# Needs Debian's postgresql package (scripts/setup.sh installs it). When run as root, the server
# runs as user "postgres", which owns DIR. Exit status: 0 done, 1 failed, 2 bad usage.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [[ -z "$bin" || ! -x "$bin/initdb" ]]; then
  echo "pg_test_server: PostgreSQL server binaries not found (apt-get install postgresql)" >&2
  exit 1
fi
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "${1:-}" in
  start)
    [[ $# -eq 3 ]] || { echo "usage: $0 start DIR PORT" >&2; exit 2; }
    dir=$2
    port=$3
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ $(id -u) -eq 0 ]] && chown postgres "$dir"
    if [[ ! -f "$dir/data/PG_VERSION" ]]; then
      as_owner "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-k $dir -h 127.0.0.1 -p $port -c fsync=on -c synchronous_commit=on" start >/dev/null ||
      { cat "$dir/server.log" >&2; exit 1; }
    if ! as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = 'gpuslice'" | grep -q 1; then
      as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc \
        "CREATE DATABASE gpuslice" >/dev/null
    fi
    echo "postgres://postgres@127.0.0.1:$port/gpuslice"
    ;;
  stop)
    [[ $# -eq 2 ]] || { echo "usage: $0 stop DIR" >&2; exit 2; }
    dir=$(cd "$2" && pwd)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
