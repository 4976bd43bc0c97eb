import type { NatsConnection } from "nats";
import type { components } from "./openapi.js";
export type JobDocument = components["schemas"]["JobDocument"];
export interface WorkerOptions {
    /** Job types to run. */
    types: string[];
    /** Subject prefix (nats.prefix), default "co". */
    prefix?: string;
    /** Job stream (nats.stream), default "COALESCE". */
    stream?: string;
    /** Attempts before a job is dead-lettered, default 5. */
    maxDeliver?: number;
    /** Backoff before the 1st, 2nd, … retry, ms. */
    backoffMs?: number[];
    /** Jobs pulled at once per type, default 16. */
    concurrency?: number;
    /** Where errors go (default console.error). */
    onError?: (err: unknown) => void;
}
export interface Worker {
    /** Stops pulling jobs and waits for those running. */
    stop(): Promise<void>;
}
/** consumerName is the durable consumer `coalesce work` uses for a type, so both kinds of worker share it. */
export declare function consumerName(type: string): string;
/** Runs handler for each job of the types until stop(). A handler that throws has its job retried. */
export declare function runWorker(nc: NatsConnection, o: WorkerOptions, handler: (job: JobDocument) => Promise<void>): Promise<Worker>;
