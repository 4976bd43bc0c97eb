/** An error answer: HTTP status, code (unsafe_integer, no_policy, …), message, the field at fault, and a 429/503's Retry-After in seconds. */
export class CoalesceError extends Error {
    status;
    code;
    field;
    retryAfter;
    constructor(status, code, message, field, retryAfter) {
        super(code ? `${code}: ${message}` : message);
        this.status = status;
        this.code = code;
        this.field = field;
        this.retryAfter = retryAfter;
        this.name = "CoalesceError";
    }
    static from(status, body, retryAfter) {
        const e = body?.error;
        if (e && typeof e.code === "string")
            return new CoalesceError(status, e.code, e.message, e.field, retryAfter);
        return new CoalesceError(status, "", `HTTP ${status}: ${String(body).slice(0, 200)}`, undefined, retryAfter);
    }
}
const retryStatuses = new Set([429, 503]);
/** A client of one daemon. */
export class Client {
    opts;
    base;
    retry;
    sleep;
    fetch;
    constructor(baseUrl = "http://127.0.0.1:8080", opts = {}) {
        this.opts = opts;
        const u = new URL(baseUrl);
        if (u.protocol !== "http:" && u.protocol !== "https:")
            throw new TypeError(`baseUrl ${baseUrl}: want http(s)://host:port`);
        this.base = baseUrl.replace(/\/+$/, "");
        this.retry = { attempts: 5, backoffMs: 200, maxWaitMs: 30000, ...opts.retry };
        this.sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
        this.fetch = opts.fetch ?? fetch;
    }
    /** Decide one event (POST /v1/events), retried safely with its Idempotency-Key. */
    async submit(type, args, o = {}) {
        const body = JSON.stringify(event(type, args, o.key, o.traceparent));
        const headers = { "Content-Type": "application/json", "Idempotency-Key": o.idempotencyKey ?? crypto.randomUUID() };
        return (await this.request("POST", "/v1/events", body, headers));
    }
    /**
     * Decide many events (POST /v1/events:batch): NDJSON out, answers yielded
     * as they arrive, in order — a Decision, or a CoalesceError for that
     * event. Events without an idempotency_key get one, so a batch refused
     * (429/503) or cut off is sent again (its answered lines excluded)
     * without counting any event twice.
     */
    async *submitBatch(events) {
        const lines = [];
        for await (const ev of events)
            lines.push(JSON.stringify({ ...ev, idempotency_key: ev.idempotency_key ?? crypto.randomUUID() }) + "\n");
        let done = 0;
        for (let attempt = 1; done < lines.length; attempt++) {
            let resp;
            try {
                resp = await this.fetch(this.base + "/v1/events:batch", {
                    method: "POST",
                    headers: this.headers({ "Content-Type": "application/x-ndjson" }),
                    body: lines.slice(done).join(""),
                    signal: AbortSignal.timeout(this.opts.timeoutMs ?? 10000),
                });
            }
            catch (err) {
                await this.wait(attempt, undefined, err);
                continue;
            }
            if (resp.status !== 200) {
                const err = CoalesceError.from(resp.status, await json(resp), retryAfter(resp));
                if (!retryStatuses.has(resp.status))
                    throw err;
                await this.wait(attempt, err.retryAfter, err);
                continue;
            }
            try {
                for await (const line of ndjsonLines(resp.body)) {
                    const doc = JSON.parse(line);
                    done++;
                    yield doc.error ? CoalesceError.from(200, doc) : doc;
                }
            }
            catch (err) {
                if (err instanceof SyntaxError)
                    throw err;
                await this.wait(attempt, undefined, err); // cut off: the rest again
                continue;
            }
            if (done < lines.length)
                throw new CoalesceError(200, "short_batch", `${lines.length - done} lines of the batch were not answered`);
        }
    }
    /** What would happen to an event, changing nothing (POST /v1/explain). */
    async explain(type, args, key) {
        return (await this.request("POST", "/v1/explain", JSON.stringify(event(type, args, key)), { "Content-Type": "application/json" }));
    }
    /** The pending round of a key, or undefined. */
    async round(type, key) {
        try {
            return (await this.request("GET", `/v1/rounds/${encodeURIComponent(type)}/${encodeURIComponent(key)}`));
        }
        catch (err) {
            if (err instanceof CoalesceError && err.status === 404 && err.code === "not_found")
                return undefined;
            throw err;
        }
    }
    /** Cancel round `round` of a key; safe to retry (a repeat changes nothing and throws CoalesceError 409 already_cancelled; it never cancels the next round). */
    async cancel(type, key, round) {
        return (await this.request("DELETE", `/v1/rounds/${encodeURIComponent(type)}/${encodeURIComponent(key)}?round=${encodeURIComponent(round)}`));
    }
    /** The daemon's policies. */
    async policies() {
        return (await this.request("GET", "/v1/policies")).policies;
    }
    headers(h) {
        return this.opts.token ? { ...h, Authorization: `Bearer ${this.opts.token}` } : h;
    }
    async request(method, path, body, headers = {}) {
        for (let attempt = 1;; attempt++) {
            let resp;
            try {
                resp = await this.fetch(this.base + path, {
                    method,
                    headers: this.headers(headers),
                    body,
                    signal: AbortSignal.timeout(this.opts.timeoutMs ?? 10000),
                });
            }
            catch (err) {
                await this.wait(attempt, undefined, err); // refused, reset, timed out
                continue;
            }
            const doc = await json(resp);
            if (resp.ok)
                return doc;
            const err = CoalesceError.from(resp.status, doc, retryAfter(resp));
            if (!retryStatuses.has(resp.status))
                throw err;
            await this.wait(attempt, err.retryAfter, err);
        }
    }
    async wait(attempt, retryAfterS, cause) {
        if (attempt >= this.retry.attempts) {
            if (cause instanceof CoalesceError)
                throw cause;
            throw new CoalesceError(0, "unavailable", `after ${attempt} attempts: ${cause?.message ?? cause}`);
        }
        let ms;
        if (retryAfterS !== undefined)
            ms = retryAfterS * 1000;
        else {
            ms = this.retry.backoffMs * 2 ** (attempt - 1);
            ms += Math.random() * (ms / 2);
        }
        await this.sleep(Math.min(ms, this.retry.maxWaitMs));
    }
}
function event(type, args, key, traceparent) {
    const ev = { type, args };
    if (key !== undefined)
        ev.key = key;
    if (traceparent !== undefined)
        ev.traceparent = traceparent;
    return ev;
}
function retryAfter(resp) {
    const v = resp.headers.get("Retry-After");
    if (v === null || !/^\d+(\.\d+)?$/.test(v.trim()))
        return undefined;
    return Number(v);
}
async function json(resp) {
    const text = await resp.text();
    try {
        return JSON.parse(text);
    }
    catch {
        return text;
    }
}
async function* ndjsonLines(body) {
    const dec = new TextDecoder();
    let buf = "";
    const reader = body.getReader();
    for (;;) {
        const { value, done } = await reader.read();
        if (value)
            buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, i).trim();
            buf = buf.slice(i + 1);
            if (line)
                yield line;
        }
        if (done)
            break;
    }
    if (buf.trim())
        yield buf.trim();
}
