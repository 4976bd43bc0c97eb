#!/usr/bin/env python3
"""Summarise scripts/bench-vs-asynq.sh output (stdin): per workload, the
median events/s of each side, the median of the per-repetition ratios
(coalesce / asynq), and each side's median p50/p99 latency in ms; coalesce's Redis CPU and allocations per event."""
import json, statistics, sys

rows = {}
for line in sys.stdin:
    parts = line.rstrip("\n").split("|", 3)
    if len(parts) != 4:
        continue
    _, name, a, c = parts
    try:
        a, c = json.loads(a), json.loads(c)
    except ValueError:
        continue
    rows.setdefault(name, []).append((a, c))

def ms(d, key):
    # coalesce bench and asynqbench both report p50_us / p99_us
    return float(d.get(key, "nan")) / 1000

print("| workload | coalesce ev/s | Asynq ev/s | ratio (median of pairs) | coalesce p50 / p99 ms | Asynq p50 / p99 ms | coalesce Redis CPU/ev | allocs/ev | pairs |")
print("|---|---|---|---|---|---|---|---|---|")
for name, pairs in rows.items():
    ce = [c["events_per_s"] for _, c in pairs]
    ae = [a["events_per_s"] for a, _ in pairs]
    ratio = statistics.median(c["events_per_s"] / a["events_per_s"] for a, c in pairs)
    cp50 = statistics.median(ms(c, "p50_us") for _, c in pairs)
    cp99 = statistics.median(ms(c, "p99_us") for _, c in pairs)
    ap50 = statistics.median(ms(a, "p50_us") for a, _ in pairs)
    ap99 = statistics.median(ms(a, "p99_us") for a, _ in pairs)
    rcpu = statistics.median(float(c.get("redis_cpu_us_per_event") or "nan") for _, c in pairs)
    allocs = statistics.median(float(c.get("allocs_per_event", "nan")) for _, c in pairs)
    print(f"| {name} | {statistics.median(ce):,.0f} | {statistics.median(ae):,.0f} | {ratio:.2f}x | "
          f"{cp50:.3f} / {cp99:.3f} | {ap50:.3f} / {ap99:.3f} | {rcpu:.1f} µs | {allocs:.1f} | {len(pairs)} |")
