// A worker over the NATS worker protocol (docs/worker-protocol.md) with the
// official `nats` package (a peer dependency): it consumes the job stream
// and asks the daemon to start (closing the job's round) and finish each
// job, as examples/node-worker does, made reusable.
//
//   import { connect } from "nats";
//   import { runWorker } from "coalesce-client/worker";
//   const nc = await connect({ servers: "nats://127.0.0.1:4222" });
//   const w = await runWorker(nc, { types: ["recompute_financials"] }, async (job) => { … });
//   … await w.stop();
import { AckPolicy, DeliverPolicy, headers, nanos } from "nats";
/** consumerName is the durable consumer `coalesce work` uses for a type, so both kinds of worker share it. */
export function consumerName(type) {
    return "coalesce_" + type.replace(/[^A-Za-z0-9_-]/g, (c) => "_" + c.charCodeAt(0).toString(16).padStart(2, "0"));
}
/** Runs handler for each job of the types until stop(). A handler that throws has its job retried. */
export async function runWorker(nc, o, handler) {
    const prefix = o.prefix ?? "co";
    const stream = o.stream ?? "COALESCE";
    const maxDeliver = o.maxDeliver ?? 5;
    const backoff = o.backoffMs ?? [1000, 5000, 30000, 120000];
    const onError = o.onError ?? ((err) => console.error(err));
    const jsm = await nc.jetstreamManager();
    const js = nc.jetstream();
    const running = new Set();
    const consumers = [];
    const forward = (m, extra = {}) => {
        const h = headers();
        for (const k of m.headers?.keys() ?? [])
            if (!k.toLowerCase().startsWith("nats-"))
                h.set(k, m.headers.get(k));
        for (const [k, v] of Object.entries(extra))
            h.set(k, v);
        return h;
    };
    const ask = async (op, m, extra) => {
        const reply = await nc.request(`${prefix}.worker.${op}`, m.data, { headers: forward(m, extra), timeout: 15000 });
        const answer = JSON.parse(new TextDecoder().decode(reply.data));
        if (answer.error)
            throw new Error(`${op}: ${answer.error.code}: ${answer.error.message}`);
        return answer;
    };
    const work = async (m) => {
        let start;
        try {
            start = await ask("start", m, { "Coalesce-Delivered": String(m.info.redeliveryCount) });
        }
        catch (err) {
            onError(err);
            m.nak(backoff[0]);
            return;
        }
        switch (start.action) {
            case "ack":
                m.ack();
                return;
            case "retry":
                m.nak(start.retry_in_ms);
                return;
            case "dead": {
                // dead_letter_body, when given, holds the args and a summary too
                // large for a header: the dead letter's body instead of the job's.
                const body = start.dead_letter_body ? new TextEncoder().encode(JSON.stringify(start.dead_letter_body)) : m.data;
                await js.publish(start.dead_letter_subject, body, { headers: forward(m, start.dead_letter_headers ?? {}) });
                await ask("finish", m, { "Coalesce-Result": "dead" });
                m.term();
                return;
            }
        }
        const job = start.job;
        const progress = setInterval(() => m.working(), 10000);
        const lease = start.lease ? { "Coalesce-Lease": start.lease } : {};
        const keep = start.lease ? setInterval(() => ask("progress", m, lease).catch(onError), (start.lease_ms ?? 30000) / 3) : undefined;
        let result = "ok";
        try {
            await handler(job);
        }
        catch (err) {
            onError(err);
            result = "failed";
        }
        finally {
            clearInterval(progress);
            if (keep)
                clearInterval(keep);
        }
        if (result === "failed" && job.attempt >= maxDeliver) {
            result = "dead";
            // The whole summary, so that a replay has every item: in a header up
            // to 32 KiB, else in the body with the args (docs/worker-protocol.md).
            const summary = JSON.stringify(job.summary);
            const extra = { "Coalesce-Error": "failed for the last time", "Coalesce-Attempts": String(job.attempt) };
            let body = m.data;
            if (summary.length <= 32 << 10) {
                extra["Coalesce-Summary"] = summary;
            }
            else {
                extra["Coalesce-Summary-In-Body"] = "1";
                body = new TextEncoder().encode(`{"args":${JSON.stringify(job.args)},"summary":${summary}}`);
            }
            const h = forward(m, extra);
            if (body !== m.data)
                h.delete("Coalesce-Summary");
            await js.publish(`${prefix}.dead.${job.type}`, body, { headers: h });
        }
        try {
            await ask("finish", m, { "Coalesce-Result": result, ...lease });
        }
        catch (err) {
            onError(err); // a redelivery's start recognises the finished job
        }
        if (result === "ok")
            m.ack();
        else if (result === "dead")
            m.term();
        else
            m.nak(backoff[Math.min(job.attempt, backoff.length) - 1]);
    };
    for (const type of o.types) {
        const name = consumerName(type);
        try {
            await jsm.consumers.info(stream, name);
        }
        catch {
            await jsm.consumers.add(stream, {
                durable_name: name,
                filter_subjects: [`${prefix}.run.${type}.*.*`, `${prefix}.jobs.${type}`],
                ack_policy: AckPolicy.Explicit,
                ack_wait: nanos(30000),
                max_deliver: -1,
                deliver_policy: DeliverPolicy.All,
                max_ack_pending: 64,
            });
        }
        const consumer = await js.consumers.get(stream, name);
        const messages = await consumer.consume({ max_messages: o.concurrency ?? 16 });
        consumers.push(messages);
        (async () => {
            for await (const m of messages) {
                const p = work(m).catch(onError);
                running.add(p);
                p.finally(() => running.delete(p));
            }
        })().catch(onError);
    }
    return {
        async stop() {
            for (const c of consumers)
                c.stop();
            await Promise.all(running);
        },
    };
}
