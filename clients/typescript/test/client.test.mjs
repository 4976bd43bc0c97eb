// Tests of the client against a running daemon, started by cmd/coalesce's
// TestTypeScriptClient with real Redis and NATS: COALESCE_URL (its HTTP API)
// and COALESCE_NATS (its NATS, for the worker helper).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { connect } from "nats";
import { Client, CoalesceError } from "../dist/index.js";
import { runWorker } from "../dist/worker.js";

const url = process.env.COALESCE_URL;
const daemon = { skip: url ? false : "COALESCE_URL is not set (cmd/coalesce's TestTypeScriptClient sets it)" };
const unique = () => randomUUID().slice(0, 12);

test("submit, explain, round, cancel", daemon, async () => {
  const c = new Client(url);
  const tenant = unique();
  const d1 = await c.submit("recompute", { tenant_id: tenant, order: 1 });
  assert.equal(d1.outcome, "scheduled");
  assert.equal(d1.replayed, undefined);
  const d2 = await c.submit("recompute", { tenant_id: tenant, order: 2 });
  assert.deepEqual([d2.outcome, d2.events, d2.round], ["coalesced", 2, d1.round]);
  const ex = await c.explain("recompute", { order: 3, tenant_id: tenant });
  assert.deepEqual([ex.key, ex.would, ex.pending?.events], [d1.key, "coalesced", 2]);
  assert.equal((await c.round("recompute", d1.key))?.events, 2);
  assert.equal((await c.cancel("recompute", d1.key, d1.round)).cancelled.round, d1.round);
  assert.equal(await c.round("recompute", d1.key), undefined);
  await assert.rejects(c.cancel("recompute", d1.key, d1.round),
    (e) => e instanceof CoalesceError && e.status === 409 && e.code === "already_cancelled");
});

test("a retry with the same idempotency key is replayed, another event refused", daemon, async () => {
  const c = new Client(url);
  const user = unique(), key = randomUUID();
  const d1 = await c.submit("digest", { user, n: 1 }, { idempotencyKey: key });
  const d2 = await c.submit("digest", { n: 1.0, user }, { idempotencyKey: key });
  assert.equal(d2.replayed, true);
  assert.deepEqual([d2.round, d2.events], [d1.round, 1]);
  await assert.rejects(c.submit("digest", { user, n: 2 }, { idempotencyKey: key }),
    (e) => e instanceof CoalesceError && e.status === 422 && e.code === "idempotency_key_reused");
  assert.equal((await c.round("digest", d1.key))?.events, 1);
});

test("errors carry code and field", daemon, async () => {
  const c = new Client(url);
  await assert.rejects(c.submit("recompute", { tenant_id: 1 }, { key: "x".repeat(2000) }),
    (e) => e instanceof CoalesceError && e.status === 400 && e.field === "key");
  await assert.rejects(c.submit("nope", {}), (e) => e.status === 404 && e.code === "no_policy" && e.field === "type");
});

test("a batch streams its answers in order; sent again it is replayed", daemon, async () => {
  const c = new Client(url);
  const user = unique();
  const events = Array.from({ length: 300 }, (_, i) => ({ type: "digest", args: { user, n: i }, idempotency_key: `${user}-${i}` }));
  events.splice(5, 0, { type: "digest", args: { user }, key: "x".repeat(2000) }); // a key over 1024 bytes is refused in place
  const first = [];
  for await (const a of c.submitBatch(events)) first.push(a);
  assert.equal(first.length, 301);
  assert.ok(first[5] instanceof CoalesceError && first[5].field === "key");
  const decisions = first.filter((a) => !(a instanceof CoalesceError));
  assert.deepEqual(decisions.map((d) => d.events), Array.from({ length: decisions.length }, (_, i) => i + 1));
  const second = [];
  for await (const a of c.submitBatch(events)) second.push(a);
  assert.ok(second.filter((a) => !(a instanceof CoalesceError)).every((d) => d.replayed === true));
});

test("the worker helper runs jobs over the worker protocol", { skip: process.env.COALESCE_NATS ? false : "COALESCE_NATS is not set" }, async () => {
  const c = new Client(url);
  const nc = await connect({ servers: process.env.COALESCE_NATS });
  const user = unique();
  const jobs = [];
  let got;
  const done = new Promise((r) => (got = r));
  const w = await runWorker(nc, { types: ["digest"] }, async (job) => {
    if (job.args?.user === user) {
      jobs.push(job);
      got();
    }
  });
  try {
    for (const n of [1, 2, 3]) await c.submit("digest", { user, n });
    await Promise.race([done, new Promise((_, no) => setTimeout(() => no(new Error("no job within 30 s")), 30000))]);
    const job = jobs[0];
    assert.deepEqual([job.v, job.summary.events, job.summary.items?.length, job.release], [1, 3, 3, "released"]);
  } finally {
    await w.stop();
    await nc.drain();
  }
});

test("429 and 503 are retried after Retry-After with the same key", async () => {
  const keys = [];
  const srv = createServer((req, res) => {
    keys.push(req.headers["idempotency-key"]);
    req.resume();
    req.on("end", () => {
      if (keys.length < 3) {
        res.writeHead(keys.length === 1 ? 429 : 503, { "Retry-After": "2", "Content-Type": "application/json" });
        res.end('{"error":{"code":"busy","message":"later"}}');
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ outcome: "coalesced", type: "t", key: "k", fingerprint: "f", round: "r", events: 2, replayed: true }));
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const slept = [];
    const base = `http://127.0.0.1:${srv.address().port}`;
    const d = await new Client(base, { sleep: async (ms) => void slept.push(ms) }).submit("t", {});
    assert.equal(d.replayed, true);
    assert.deepEqual(slept, [2000, 2000]);
    assert.equal(new Set(keys).size, 1, "every attempt carries the same Idempotency-Key");
    keys.length = 0;
    await assert.rejects(new Client(base, { sleep: async () => {}, retry: { attempts: 1 } }).submit("t", {}),
      (e) => e.status === 429 && e.retryAfter === 2);
  } finally {
    srv.close();
  }
});
