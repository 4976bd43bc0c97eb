#!/usr/bin/env python3
"""Peak resident memory of `coalesce serve` under hostile batch requests.

Each case starts a fresh daemon (examples/coalesce.yaml, default http limits),
sends its batch bodies at once and reads VmHWM from /proc. Any arguments are
passed to `coalesce serve` (for example --redis URL --nats URL; the script
FLUSHALLs a Redis on port 6390 before each case when REDIS_FLUSH_PORT is set).

  go build -o /tmp/coalesce ./cmd/coalesce
  COALESCE_BIN=/tmp/coalesce python3 internal/daemon/testdata/hostile_batches.py \
      --redis redis://127.0.0.1:6390/0 --nats nats://127.0.0.1:4230
"""
import http.client, os, shutil, subprocess, sys, tempfile, threading, time

BIN = os.environ.get("COALESCE_BIN", "coalesce")
CFG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "coalesce.yaml")
EXTRA = sys.argv[1:]
WORK = tempfile.mkdtemp(prefix="coalesce-hostile-")


def start():
    if os.environ.get("REDIS_FLUSH_PORT"):
        subprocess.run(["redis-cli", "-p", os.environ["REDIS_FLUSH_PORT"], "flushall"], capture_output=True)
    shutil.rmtree(os.path.join(WORK, "coalesce-data"), ignore_errors=True)
    p = subprocess.Popen([BIN, "serve", "--config", CFG] + EXTRA, cwd=WORK,
                         stdout=open(os.path.join(WORK, "serve.log"), "w"), stderr=subprocess.STDOUT)
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", 8080, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the daemon did not become ready; see " + WORK + "/serve.log")


def mib(p, field):
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024


def post(body, out):
    try:
        c = http.client.HTTPConnection("127.0.0.1", 8080, timeout=600)
        c.request("POST", "/v1/events:batch", body=body, headers={"Content-Type": "application/x-ndjson"})
        r = c.getresponse()
        data = r.read()
        out.append((r.status, data.count(b'"outcome"')))
    except OSError as e:
        out.append((repr(e), 0))


def events(n, pad, base=0):
    return b"".join(b'{"type":"recompute_financials","args":{"tenant_id":%d,"pad":"%s"}}\n' % (base + i, b"p" * pad) for i in range(n))


CASES = {
    "64 MiB of blank lines": lambda: [b"\n" * (64 << 20)],
    "50,000 events of 1.3 KB": lambda: [events(50_000, 1250)],
    "8 clients at once, 50,000 events of 1.3 KB each": lambda: [events(50_000, 1250, 100_000 * k) for k in range(8)],
    "60 lines of 1 MiB (the per-line limit)": lambda: [(b'{"type":"recompute_financials","args":{"tenant_id":1,"pad":"' + b"p" * ((1 << 20) - 100) + b'"}}\n') * 60],
    "50,001 events (one line over the limit)": lambda: [events(50_001, 10)],
}

print("| case | bytes sent | answers | lines decided | took | RSS before | peak RSS |")
print("|---|---|---|---|---|---|---|")
for name, make in CASES.items():
    bodies = make()
    p = start()
    before = mib(p, "VmHWM")
    out, t0 = [], time.time()
    threads = [threading.Thread(target=post, args=(b, out)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took, peak = time.time() - t0, mib(p, "VmHWM")
    p.terminate()
    p.wait()
    codes = ", ".join(sorted(set(str(o[0]) for o in out)))
    print(f"| {name} | {sum(len(b) for b in bodies) / (1 << 20):.0f} MiB | {codes} | {sum(o[1] for o in out):,} | {took:.1f} s | {before} MiB | {peak} MiB |", flush=True)
shutil.rmtree(WORK, ignore_errors=True)
