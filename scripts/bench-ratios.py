#!/usr/bin/env python3
"""Summarise scripts/bench-vs-asynq.sh output (stdin): per workload, the
median events/s of each side, the median of the per-repetition ratios
(coalesce / asynq), and each side's median p50/p99 latency in ms; coalesce's
Redis CPU and allocations per event. Lines with a fifth field (BASE=...:
an older coalesce run beside each repetition) add a second table: the older
build's ratio to Asynq, the new one's, and the median and range of the
new/older pairs, with each side's Redis and producer CPU per event."""
import json, statistics, sys

rows = {}
for line in sys.stdin:
    parts = line.rstrip("\n").split("|", 4)
    if len(parts) not in (4, 5):
        continue
    try:
        a, c = json.loads(parts[2]), json.loads(parts[3])
        b = json.loads(parts[4]) if len(parts) == 5 else None
    except ValueError:
        continue
    if not all(isinstance(d, dict) and d.get("events_per_s") for d in (a, c, b) if d is not None):
        continue  # a run that failed printed no figures
    rows.setdefault(parts[1], []).append((a, c, b))

def ms(d, key):
    # coalesce bench and asynqbench both report p50_us / p99_us
    return float(d.get(key, "nan")) / 1000

def med(xs):
    return statistics.median(list(xs))

def num(d, key):
    return float(d.get(key) or "nan")

print("| workload | coalesce ev/s | Asynq ev/s | ratio (median of pairs) | coalesce p50 / p99 ms | Asynq p50 / p99 ms | coalesce Redis CPU/ev | allocs/ev | pairs |")
print("|---|---|---|---|---|---|---|---|---|")
for name, runs in rows.items():
    ce = [c["events_per_s"] for _, c, _ in runs]
    ae = [a["events_per_s"] for a, _, _ in runs]
    ratio = med(c["events_per_s"] / a["events_per_s"] for a, c, _ in runs)
    cp50 = med(ms(c, "p50_us") for _, c, _ in runs)
    cp99 = med(ms(c, "p99_us") for _, c, _ in runs)
    ap50 = med(ms(a, "p50_us") for a, _, _ in runs)
    ap99 = med(ms(a, "p99_us") for a, _, _ in runs)
    rcpu = med(num(c, "redis_cpu_us_per_event") for _, c, _ in runs)
    allocs = med(num(c, "allocs_per_event") for _, c, _ in runs)
    print(f"| {name} | {med(ce):,.0f} | {med(ae):,.0f} | {ratio:.2f}x | "
          f"{cp50:.3f} / {cp99:.3f} | {ap50:.3f} / {ap99:.3f} | {rcpu:.1f} µs | {allocs:.1f} | {len(runs)} |")

based = {name: [r for r in runs if r[2] is not None] for name, runs in rows.items()}
based = {name: runs for name, runs in based.items() if runs}
if based:
    print()
    print("| workload | before / Asynq | after / Asynq | after / before (median, range) | Redis CPU/ev before -> after | producer CPU/ev before -> after | allocs/ev before -> after | pairs |")
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in based.items():
        before = med(b["events_per_s"] / a["events_per_s"] for a, _, b in runs)
        after = med(c["events_per_s"] / a["events_per_s"] for a, c, _ in runs)
        pairs = [c["events_per_s"] / b["events_per_s"] for _, c, b in runs]
        side = lambda key: f"{med(num(b, key) for _, _, b in runs):.2f} -> {med(num(c, key) for _, c, _ in runs):.2f}"
        print(f"| {name} | {before:.2f}x | {after:.2f}x | {med(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f}) | "
              f"{side('redis_cpu_us_per_event')} µs | {side('client_cpu_us_per_event')} µs | "
              f"{side('allocs_per_event')} | {len(runs)} |")
