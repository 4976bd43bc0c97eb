import type { components } from "./openapi.js";
export type Event = components["schemas"]["Event"];
export type Decision = components["schemas"]["Decision"];
export type Explanation = components["schemas"]["Explanation"];
export type Round = components["schemas"]["Round"];
export type CancelAnswer = components["schemas"]["CancelAnswer"];
export type Policy = components["schemas"]["Policy"];
export type JobDocument = components["schemas"]["JobDocument"];
export type StartAnswer = components["schemas"]["StartAnswer"];
export type ErrorBody = components["schemas"]["ErrorBody"];
export type { components, paths } from "./openapi.js";
/** An error answer: HTTP status, code (unsafe_integer, no_policy, …), message, the field at fault, and a 429/503's Retry-After in seconds. */
export declare class CoalesceError extends Error {
    readonly status: number;
    readonly code: string;
    readonly field?: string | undefined;
    readonly retryAfter?: number | undefined;
    constructor(status: number, code: string, message: string, field?: string | undefined, retryAfter?: number | undefined);
    static from(status: number, body: unknown, retryAfter?: number): CoalesceError;
}
export interface RetryPolicy {
    /** Attempts in all (default 5). */
    attempts: number;
    /** First backoff for network errors, ms, doubled each time (default 200). */
    backoffMs: number;
    /** Longest wait, ms (default 30000). */
    maxWaitMs: number;
}
export interface ClientOptions {
    token?: string;
    /** Per-request time-out, ms (default 10000). */
    timeoutMs?: number;
    retry?: Partial<RetryPolicy>;
    /** For tests: how the client waits. */
    sleep?: (ms: number) => Promise<void>;
    fetch?: typeof fetch;
}
export interface SubmitOptions {
    key?: string;
    traceparent?: string;
    idempotencyKey?: string;
}
/** A client of one daemon. */
export declare class Client {
    private readonly opts;
    private readonly base;
    private readonly retry;
    private readonly sleep;
    private readonly fetch;
    constructor(baseUrl?: string, opts?: ClientOptions);
    /** Decide one event (POST /v1/events), retried safely with its Idempotency-Key. */
    submit(type: string, args: unknown, o?: SubmitOptions): Promise<Decision>;
    /**
     * Decide many events (POST /v1/events:batch): NDJSON out, answers yielded
     * as they arrive, in order — a Decision, or a CoalesceError for that
     * event. Events without an idempotency_key get one, so a batch refused
     * (429/503) or cut off is sent again (its answered lines excluded)
     * without counting any event twice.
     */
    submitBatch(events: Iterable<Event> | AsyncIterable<Event>): AsyncGenerator<Decision | CoalesceError>;
    /** What would happen to an event, changing nothing (POST /v1/explain). */
    explain(type: string, args: unknown, key?: string): Promise<Explanation>;
    /** The pending round of a key, or undefined. */
    round(type: string, key: string): Promise<Round | undefined>;
    /** Cancel round `round` of a key; safe to retry (a repeat changes nothing and throws CoalesceError 409 already_cancelled; it never cancels the next round). */
    cancel(type: string, key: string, round: string): Promise<CancelAnswer>;
    /** The daemon's policies. */
    policies(): Promise<Policy[]>;
    private headers;
    private request;
    private wait;
}
