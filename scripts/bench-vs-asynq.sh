#!/usr/bin/env bash
# Side by side on one Redis: Asynq TaskID (../shared/peerbench/asynq, built as
# asynqbench; TaskID with ProcessIn for the cold rows, where every job is
# delayed) and `coalesce bench` (the library, local joins on), alternating
# per workload, REPS repetitions. Needs a running redis-server on REDIS_PORT
# and a nats-server 2.12+ with JetStream at NATS_URL; FLUSHALL before each
# run. Prints one line per run: rep|workload|asynq JSON|coalesce JSON.
# ROWS picks workloads by name (default: all), e.g. ROWS="cold-c50 last-c1".
# The last-on rows give the policy local_joins: on (payload keys, a `coalesce
# bench` since issue 25's second pass). Debounce rounds wait where
# schedules: auto puts them (held in Redis when it has an append-only file,
# as the Redis of docs/performance.md's rows: start it with --appendonly yes;
# a JetStream schedule each without one) unless SCHEDULES=redis|jetstream
# says.
#
# BASE=path/to/an/older/coalesce adds a before/after comparison: each
# repetition runs Asynq, then BASE and COALESCE in an order swapped every
# repetition (a pair's second run is often the slower one on a noisy
# machine), and the line gets a fifth field, BASE's JSON. bench-ratios.py
# then adds BASE's ratio to Asynq and the median of the new/BASE pairs.
set -u
REDIS_PORT=${REDIS_PORT:-7911}
NATS_URL=${NATS_URL:-nats://127.0.0.1:14343}
ASYNQ=${ASYNQ:-asynqbench}
COALESCE=${COALESCE:-coalesce}
REPS=${REPS:-3}
ROWS=${ROWS:-}
SCHEDULES=${SCHEDULES:-}
BASE=${BASE:-}
# name events keys concurrency asynq-mode coalesce-flags
WORKLOADS=(
  "storm-c50 200000 100 50 taskid --payload first"
  "storm-c1 200000 100 1 taskid --payload first"
  "first-c50 100000 1000 50 taskid --payload first"
  "first-c1 100000 1000 1 taskid --payload first"
  "cold-c50 50000 50000 50 taskid_processin --payload first"
  "cold-c1 20000 20000 1 taskid_processin --payload first"
  "last-c50 100000 1000 50 taskid --payload last"
  "last-c1 30000 1000 1 taskid --payload last"
  "last-on-c50 100000 1000 50 taskid --payload last --local-joins on"
  "last-on-c1 30000 1000 1 taskid --payload last --local-joins on"
  "accumulate-c50 100000 1000 50 taskid --payload accumulate"
  "accumulate-c1 30000 1000 1 taskid --payload accumulate"
  "extend-c50 100000 1000 50 taskid --mode extend"
)
for rep in $(seq "$REPS"); do
  for w in "${WORKLOADS[@]}"; do
    set -- $w
    name=$1 events=$2 keys=$3 conc=$4 amode=$5
    shift 5
    if [ -n "$ROWS" ] && [[ " $ROWS " != *" $name "* ]]; then continue; fi
    redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null; redis-cli -p "$REDIS_PORT" SCRIPT FLUSH >/dev/null
    a=$("$ASYNQ" -port "$REDIS_PORT" -mode "$amode" -concurrency "$conc" -events "$events" -keys "$keys" -ttl 300s 2>/dev/null | tail -1)
    run() { # $1: the coalesce binary; the workload's flags follow
      local bin=$1
      shift
      redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null; redis-cli -p "$REDIS_PORT" SCRIPT FLUSH >/dev/null
      "$bin" bench --redis "redis://127.0.0.1:$REDIS_PORT/0" --nats "$NATS_URL" \
        --events "$events" --keys "$keys" --concurrency "$conc" --window 5m ${SCHEDULES:+--schedules "$SCHEDULES"} "$@" 2>/dev/null | tail -1
    }
    if [ -z "$BASE" ]; then
      c=$(run "$COALESCE" "$@")
      echo "$rep|$name|$a|$c"
    elif [ $((rep % 2)) = 1 ]; then
      b=$(run "$BASE" "$@")
      c=$(run "$COALESCE" "$@")
      echo "$rep|$name|$a|$c|$b"
    else
      c=$(run "$COALESCE" "$@")
      b=$(run "$BASE" "$@")
      echo "$rep|$name|$a|$c|$b"
    fi
  done
done
