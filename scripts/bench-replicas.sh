#!/usr/bin/env bash
# The cost of replication acks: `coalesce bench` on a real primary with one
# replica (both redis-server on loopback, started here), with
# redis.replicas.acks off and auto (WAIT 1 after each decision's writes),
# alternating, REPS repetitions, at 1 and 50 in flight, for the standard
# workload (1,000 keys, payload first), payload last and every event a new
# key (cold). Needs COALESCE (the built binary) and NATS_BIN, a nats-server
# 2.12+ (started here, on an empty store for every run). Prints one line per
# run:
#   rep|workload|acks|WAIT calls the primary served|coalesce bench JSON
set -eu
COALESCE=${COALESCE:-coalesce}
NATS_BIN=${NATS_BIN:-$HOME/.cache/coalesce/nats-server-v2.15.2}
NATS_PORT=${NATS_PORT:-14353}
NATS_URL=nats://127.0.0.1:$NATS_PORT
REPS=${REPS:-3}
P=${PRIMARY_PORT:-7921}
R=${REPLICA_PORT:-7922}
dir=$(mktemp -d)
nats_pid=
stop_nats() { if [ -n "$nats_pid" ]; then kill "$nats_pid" 2>/dev/null; wait "$nats_pid" 2>/dev/null || true; nats_pid=; fi; }
start_nats() {
  stop_nats; rm -rf "$dir/js"
  "$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 & nats_pid=$!
  until grep -q "Server is ready" "$dir/nats.log"; do sleep 0.05; done
}
trap 'stop_nats; redis-cli -p $P shutdown nosave >/dev/null 2>&1 || true; redis-cli -p $R shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/p.log"
redis-server --port "$R" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/r.log" --replicaof 127.0.0.1 "$P"
until redis-cli -p "$R" info replication | grep -q master_link_status:up; do sleep 0.1; done
for acks in off auto; do
  printf 'redis:\n  url: redis://127.0.0.1:%s/0\n  replicas:\n    acks: %s\nnats:\n  url: %s\n' "$P" "$acks" "$NATS_URL" >"$dir/$acks.yaml"
done
for rep in $(seq "$REPS"); do
  for w in "100000 1000 50 first" "20000 1000 1 first" "50000 1000 50 last" "10000 1000 1 last" "50000 50000 50 first" "10000 10000 1 first"; do
    set -- $w
    for acks in off auto; do
      start_nats
      redis-cli -p "$P" FLUSHALL >/dev/null; redis-cli -p "$P" CONFIG RESETSTAT >/dev/null
      until [ "$(redis-cli -p "$R" dbsize)" = 0 ]; do sleep 0.05; done
      out=$("$COALESCE" bench --config "$dir/$acks.yaml" --events "$1" --keys "$2" --concurrency "$3" \
        --payload "$4" --window 5m --prefix "r$rep$acks" 2>/dev/null | tail -1)
      waits=$(redis-cli -p "$P" info commandstats | sed -n 's/^cmdstat_wait:calls=\([0-9]*\).*/\1/p')
      echo "$rep|$1 events $2 keys c$3 $4|$acks|WAIT calls ${waits:-0}|$out"
    done
  done
done
