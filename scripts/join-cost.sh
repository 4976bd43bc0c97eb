#!/usr/bin/env bash
# Instructions redis-server spends per joined event in join_many.lua (eight
# events of payload last or accumulate to a call, each joining a pending
# hash-layout round; with accumulate-new each event brings a new item, as
# every event of `coalesce bench`'s accumulate row does: keep calls below
# ~110 so that the rounds stay listpacks, as that row's do), or with `held`
# per opening in open_held_many.lua (eight events to a call, each opening a
# new key's round held in Redis, with a 330-byte identity), counted by
# callgrind: repeatable whatever else the machine is doing, unlike CPU time.
# Used for issue 25's fourth to eighth passes (docs/performance.md). Needs
# valgrind, redis-server, redis-cli and redis-benchmark on PATH.
#
#   scripts/join-cost.sh [last|accumulate|accumulate-new|held] [calls]
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

# The script as scripts.go builds it: join_tail.lua and join_fields.lua in
# place of join_many's markers, seen.lua in place of open_held_many's.
script=join_many.lua
[ "$payload" = held ] && script=open_held_many.lua
python3 - "$root/debounce/scripts" "$script" "$work/script.lua" <<'PY'
import sys
d, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
src = open(d + "/" + name).read()
src = src.replace("--JOIN--", open(d + "/join_tail.lua").read(), 1)
src = src.replace("--SEEN--", open(d + "/seen.lua").read(), 1)
src = src.replace("--FIELDS--", open(d + "/join_fields.lua").read(), 1)
open(out, "w").write(src)
PY

run() { # $1: script text; prints the program's total instructions
  rm -rf "$work/data" && mkdir -p "$work/data"
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync no --hz 1 \
    --enable-debug-command local --dir "$work/data" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 600); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "join-cost: redis-server under valgrind did not start on port $port" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
  fi
  local sha
  sha=$(redis-cli -p "$port" script load "$1")
  if [ "$payload" = held ]; then
    # Eight new keys per call (redis-benchmark draws each __rand_int__
    # apart), each opened held: the arguments open_packed.lua takes.
    redis-cli -p "$port" debug set-active-expire 0 >/dev/null 2>&1 || true
    local id='{"v":1,"type":"bench","key":"590831dd91c597f229efaac9702c93d56d889fed1e889f880821c87226b40e20","fp":"590831dd91c597f229efaac9702c93d56d889fed1e889f880821c87226b40e20","mode":"debounce","payload":"first","ttl":605100000,"args":{"tenant_id":"tenant-5","seq":5},"round":"00689d4aae71e0a6","opened":1796656964071,"due":1796657264071}'
    local now
    now=$(date +%s%3N)
    local a=(4595133970448384 $((now + 605100000)) "$now" 605100000 $((now + 300000)) "$id")
    redis-benchmark -p "$port" -c 1 -n "$calls" -r 1000000000 -q evalsha "$sha" 10 due ids \
      'b{__rand_int__}' 'b{__rand_int__}' 'b{__rand_int__}' 'b{__rand_int__}' 'b{__rand_int__}' 'b{__rand_int__}' 'b{__rand_int__}' 'b{__rand_int__}' \
      "${a[@]}" "${a[@]}" "${a[@]}" "${a[@]}" "${a[@]}" "${a[@]}" "${a[@]}" "${a[@]}" >/dev/null 2>&1
    # Every event opened a round of its own, listed with its identity (a
    # random key drawn twice joins instead: a few in a billion).
    if [ "$1" != 'return 0' ] && [ "$(redis-cli -p "$port" zcard due)" -lt "$((8 * calls * 99 / 100))" ]; then
      echo "join-cost: the calls did not open their rounds (the due list holds $(redis-cli -p "$port" zcard due))" >&2
      redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
      exit 1
    fi
  else
    # Eight pending rounds as open_round.lua writes them for payload last.
    for i in 1 2 3 4 5 6 7 8; do
      redis-cli -p "$port" hset "r$i" t 8290281888981298547 n 3 f 1796656606546 l 1796656606579 \
        d 1796656906546 p 1 v 0 k "$(printf 'k%.0s' $(seq 40))" o '{"tenant_id":"tenant-9","seq":99}' \
        a '{"tenant_id":"tenant-9","seq":299}' z 0 m 1 'i{"tenant_id":"tenant-9","seq":2999}' 1 q 1 >/dev/null
    done
    redis-cli -p "$port" zadd due 1 x >/dev/null
    local ev='{"tenant_id":"tenant-9","seq":2999}' now=1796656532243 p=$payload
    if [ "$payload" = accumulate-new ]; then
      # A new item every event (redis-benchmark draws each __rand_int__
      # apart), short of max items.
      ev='{"tenant_id":"tenant-9","seq":__rand_int__}' p=accumulate
    fi
    redis-benchmark -p "$port" -c 1 -n "$calls" -r 1000000000 -q evalsha "$sha" 9 due r1 r2 r3 r4 r5 r6 r7 r8 \
      1 0 0 "$p" 1000000 $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" $now "$ev" >/dev/null 2>&1
    # Every call joined all eight rounds (a count of 3 + calls), or the
    # count measured something else.
    if [ "$1" != 'return 0' ] && [ "$(redis-cli -p "$port" hget r1 n)" != "$((3 + calls))" ]; then
      echo "join-cost: the rounds were not joined by every call (r1 counts $(redis-cli -p "$port" hget r1 n))" >&2
      redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
      exit 1
    fi
  fi
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  # KEEP_CG=prefix keeps each run's callgrind file (callgrind_annotate).
  [ -n "${KEEP_CG:-}" ] && cp "$work/cg.out" "$KEEP_CG.$(date +%s%N)"
  awk '/^(summary|totals):/ {print $2; exit}' "$work/cg.out"
}

base=$(run 'return 0')
cost=$(run "$(cat "$work/script.lua")")
per_call=$(( (cost - base) / calls ))
if [ "$payload" = held ]; then
  echo "open_held_many.lua: $per_call instructions per call of 8 held openings, $(( per_call / 8 )) per opening"
else
  echo "join_many.lua, payload $payload: $per_call instructions per call of 8 joins, $(( per_call / 8 )) per joined event"
fi
