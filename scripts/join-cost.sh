#!/usr/bin/env bash
# Instructions redis-server spends per joined event in join_many.lua (eight
# events of payload last or accumulate to a call, each joining a pending
# hash-layout round), counted by callgrind: repeatable whatever else the
# machine is doing, unlike CPU time. Used for issue 25's fourth pass
# (docs/performance.md). Needs valgrind, redis-server, redis-cli and
# redis-benchmark on PATH.
#
#   scripts/join-cost.sh [last|accumulate] [calls]
#
# Prints the instructions per call and per event, less those of the same
# number of calls of `return 0` with the same arguments. --hz 1 keeps the
# server's timer work, which grows with the run's wall time, out of the count.
set -eu
payload=${1:-last}
calls=${2:-1000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# join_many.lua as scripts.go builds it: join_tail.lua in place of its marker.
python3 - "$root/debounce/scripts" "$work/join_many.lua" <<'PY'
import sys
d, out = sys.argv[1], sys.argv[2]
many = open(d + "/join_many.lua").read()
tail = open(d + "/join_tail.lua").read()
open(out, "w").write(many.replace("--JOIN--", tail, 1))
PY

run() { # $1: script text; prints the program's total instructions
  rm -rf "$work/data" && mkdir -p "$work/data"
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync no --hz 1 \
    --dir "$work/data" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 600); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "join-cost: redis-server under valgrind did not start on port $port" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
  fi
  # Eight pending rounds as open_round.lua writes them for payload last.
  for i in 1 2 3 4 5 6 7 8; do
    redis-cli -p "$port" hset "r$i" t 8290281888981298547 n 3 f 1796656606546 l 1796656606579 \
      d 1796656906546 p 1 v 0 k "$(printf 'k%.0s' $(seq 40))" o '{"tenant_id":"tenant-9","seq":99}' \
      a '{"tenant_id":"tenant-9","seq":299}' z 0 m 1 'i{"tenant_id":"tenant-9","seq":2999}' 1 q 1 >/dev/null
  done
  redis-cli -p "$port" zadd due 1 x >/dev/null
  local sha
  sha=$(redis-cli -p "$port" script load "$1")
  local ev='{"tenant_id":"tenant-9","seq":2999}' now=1796656532243
  redis-benchmark -p "$port" -c 1 -n "$calls" -q evalsha "$sha" 9 due r1 r2 r3 r4 r5 r6 r7 r8 \
    1 0 0 "$payload" 0 $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" >/dev/null 2>&1
  # Every call joined all eight rounds (a count of 3 + calls), or the
  # count measured something else.
  if [ "$1" != 'return 0' ] && [ "$(redis-cli -p "$port" hget r1 n)" != "$((3 + calls))" ]; then
    echo "join-cost: the rounds were not joined by every call (r1 counts $(redis-cli -p "$port" hget r1 n))" >&2
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    exit 1
  fi
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  awk '/^(summary|totals):/ {print $2; exit}' "$work/cg.out"
}

base=$(run 'return 0')
joins=$(run "$(cat "$work/join_many.lua")")
per_call=$(( (joins - base) / calls ))
echo "join_many.lua, payload $payload: $per_call instructions per call of 8 joins, $(( per_call / 8 )) per joined event"
