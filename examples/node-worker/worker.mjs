// A coalesce worker in Node: the official `nats` client and the worker
// protocol (docs/worker-protocol.md), nothing else. For each job message it
// asks the daemon to start the job (which closes the job's round, so events
// during the run open the next one), runs the handler with the job document
// the daemon answers, then asks it to finish the job.
//
//   npm ci && NATS_URL=nats://127.0.0.1:4222 JOB_TYPE=recompute_financials node worker.mjs
//
// Environment: NATS_URL, JOB_TYPE (comma-separated), COALESCE_PREFIX ("co"),
// COALESCE_STREAM ("COALESCE"), JOB_LOG (append one JSON line per job run to
// this file instead of printing it).
import { appendFileSync } from "node:fs";
import { AckPolicy, DeliverPolicy, connect, headers, nanos } from "nats";

const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const types = (process.env.JOB_TYPE ?? "recompute_financials").split(",").map((t) => t.trim()).filter(Boolean);
const prefix = process.env.COALESCE_PREFIX ?? "co";
const stream = process.env.COALESCE_STREAM ?? "COALESCE";
const jobLog = process.env.JOB_LOG;
const backoff = [1000, 5000, 30000, 120000]; // ms before the 1st, 2nd, ... retry

// The handler: your work goes here. job is the document --exec gets on stdin
// (v, type, args, key, round, attempt, release, summary: events, first_seen,
// last_seen, payload, items). Throw to have the job retried.
async function handle(job) {
  const started = Date.now() / 1000;
  if (job.args?.sleep_ms) await new Promise((r) => setTimeout(r, job.args.sleep_ms)); // a slow job, for the test
  const line = JSON.stringify({ started, ended: Date.now() / 1000, job });
  if (jobLog) appendFileSync(jobLog, line + "\n");
  else console.log(line);
}

// The consumer's name and filters are the ones `coalesce work` uses, so the
// two share one consumer (a work-queue stream allows one per subject).
function consumerName(type) {
  return "coalesce_" + type.replace(/[^A-Za-z0-9_-]/g, (c) => "_" + c.charCodeAt(0).toString(16).padStart(2, "0"));
}

// forward copies a job message's headers (never the Nats-* ones) onto a
// request, as the protocol asks.
function forward(m, extra) {
  const h = headers();
  for (const k of m.headers?.keys() ?? []) {
    if (!k.toLowerCase().startsWith("nats-")) h.set(k, m.headers.get(k));
  }
  for (const [k, v] of Object.entries(extra)) h.set(k, v);
  return h;
}

async function ask(nc, op, m, extra) {
  const reply = await nc.request(`${prefix}.worker.${op}`, m.data, { headers: forward(m, extra), timeout: 15000 });
  const answer = JSON.parse(new TextDecoder().decode(reply.data));
  if (answer.error) throw new Error(`${op}: ${answer.error.code}: ${answer.error.message}`);
  return answer;
}

async function work(nc, js, m) {
  const delivered = m.info.redeliveryCount; // 1 for the first delivery
  let start;
  try {
    start = await ask(nc, "start", m, { "Coalesce-Delivered": String(delivered) });
  } catch (err) {
    console.error(`start failed, the job waits: ${err.message}`);
    m.nak(backoff[0]);
    return;
  }
  switch (start.action) {
    case "ack": // rescheduled (an extended round), or its job runs elsewhere
      m.ack();
      return;
    case "retry": // result "key_busy": another job of an exclusive key runs
      m.nak(start.retry_in_ms);
      return;
    case "dead": {
      // Dead-letter first, then finish: finished first, a failed publish
      // would leave the job neither run nor dead-lettered.
      // dead_letter_body, when given, holds the args and a summary too
      // large for a header: the dead letter's body instead of the job's.
      const body = start.dead_letter_body ? new TextEncoder().encode(JSON.stringify(start.dead_letter_body)) : m.data;
      await js.publish(start.dead_letter_subject, body, { headers: forward(m, start.dead_letter_headers) });
      await ask(nc, "finish", m, { "Coalesce-Result": "dead" });
      m.term();
      return;
    }
  }
  const job = start.job; // action "run"
  const progress = setInterval(() => m.working(), 10000); // not redelivered while it runs
  // An exclusive job holds its key: refresh the lease while it runs.
  const lease = start.lease ? { "Coalesce-Lease": start.lease } : {};
  const keep = start.lease
    ? setInterval(() => ask(nc, "progress", m, lease).catch((err) => console.error(`progress: ${err.message}`)), start.lease_ms / 3)
    : null;
  let result = "ok";
  try {
    await handle(job);
  } catch (err) {
    console.error(`job ${job.type} ${job.key} attempt ${job.attempt} failed: ${err.message}`);
    result = "failed";
  } finally {
    clearInterval(progress);
    if (keep) clearInterval(keep);
  }
  const maxDeliver = 5;
  if (result === "failed" && job.attempt >= maxDeliver) {
    result = "dead";
    // The dead letter before finishing, with what a replay needs: the
    // whole summary, in a header up to 32 KiB, else in the body with the args.
    const summary = JSON.stringify(job.summary);
    const extra = { "Coalesce-Error": "failed for the last time", "Coalesce-Attempts": String(job.attempt) };
    let body = m.data;
    if (summary.length <= 32 << 10) {
      extra["Coalesce-Summary"] = summary;
    } else {
      extra["Coalesce-Summary-In-Body"] = "1";
      body = new TextEncoder().encode(`{"args":${JSON.stringify(job.args)},"summary":${summary}}`);
    }
    const h = forward(m, extra);
    if (body !== m.data) h.delete("Coalesce-Summary");
    await js.publish(`${prefix}.dead.${job.type}`, body, { headers: h });
  }
  try {
    await ask(nc, "finish", m, { "Coalesce-Result": result, ...lease });
  } catch (err) {
    console.error(`finish failed: ${err.message}`); // a redelivery starts it again ("retry")
  }
  if (result === "ok") m.ack();
  else if (result === "dead") m.term();
  else m.nak(backoff[Math.min(job.attempt, backoff.length) - 1]);
}

const nc = await connect({ servers: url, maxReconnectAttempts: -1 });
const jsm = await nc.jetstreamManager();
const js = nc.jetstream();
const running = [];
for (const type of types) {
  const name = consumerName(type);
  try {
    await jsm.consumers.info(stream, name);
  } catch {
    await jsm.consumers.add(stream, {
      durable_name: name,
      filter_subjects: [`${prefix}.run.${type}.*.*`, `${prefix}.jobs.${type}`],
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(30000),
      max_deliver: -1, // the worker dead-letters after its attempts itself
      deliver_policy: DeliverPolicy.All,
      max_ack_pending: 64,
    });
  }
  const consumer = await js.consumers.get(stream, name);
  const messages = await consumer.consume({ max_messages: 16 });
  running.push(messages);
  (async () => {
    for await (const m of messages) work(nc, js, m).catch((err) => console.error(err));
  })();
}
console.log(`working ${types.join(",")} on ${url}`);
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    for (const m of running) m.stop();
    await nc.drain();
    process.exit(0);
  });
}
