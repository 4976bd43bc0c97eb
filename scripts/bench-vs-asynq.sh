#!/usr/bin/env bash
# Side by side on one Redis: Asynq TaskID (../shared/peerbench/asynq, built as
# asynqbench) and `coalesce bench` (the library, local joins on), alternating
# per workload, 3 repetitions. Needs a running redis-server on REDIS_PORT and
# a nats-server 2.12+ with JetStream at NATS_URL; FLUSHALL before each run.
# Prints one line per run: rep|workload|asynq events/s|coalesce JSON.
set -u
REDIS_PORT=${REDIS_PORT:-7911}
NATS_URL=${NATS_URL:-nats://127.0.0.1:14343}
ASYNQ=${ASYNQ:-asynqbench}
COALESCE=${COALESCE:-coalesce}
REPS=${REPS:-3}
for rep in $(seq "$REPS"); do
  for w in "200000 100 50" "200000 100 1" "100000 1000 50" "100000 1000 1"; do
    set -- $w
    redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null; redis-cli -p "$REDIS_PORT" SCRIPT FLUSH >/dev/null
    a=$("$ASYNQ" -port "$REDIS_PORT" -mode taskid -concurrency "$3" -events "$1" -keys "$2" -ttl 300s 2>/dev/null |
      python3 -c "import json,sys; print(json.load(sys.stdin)['events_per_s'])")
    redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null; redis-cli -p "$REDIS_PORT" SCRIPT FLUSH >/dev/null
    c=$("$COALESCE" bench --redis "redis://127.0.0.1:$REDIS_PORT/0" --nats "$NATS_URL" \
      --events "$1" --keys "$2" --concurrency "$3" --window 5m 2>/dev/null | tail -1)
    echo "$rep|$1 events $2 keys c$3|$a|$c"
  done
done
