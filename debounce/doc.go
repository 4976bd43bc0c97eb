// Package debounce decides, per event, whether it starts work or joins work
// already pending: the producer-side core of coalesce.
//
// # Events, keys and rounds
//
// An Event names a job type and its arguments. Its Policy (one per job type,
// given to New in Config.Policies) says how events of that type coalesce:
// ModeDedup (one job while one is pending, released at the job's start, at
// its success or at expiry), ModeThrottle (the first event of each window
// runs at once, optionally a trailing job for the rest) or ModeDebounce (one
// job a window after the first event, or with Extend after the last, never
// later than MaxWait). Payload says what the job carries: the first event's
// args, the last one's, or every event's item accumulated.
//
// Events that mean the same effect share a RoundKey: the fp1 fingerprint
// (package fingerprint) of the job type and the canonical args, or of the
// policy's KeyFields only (say tenant_id), or an explicit Event.Key. A
// round is the pending work of one key: the first event opens it, later
// events join it, and it ends when its job starts (Start, called by the
// worker) or it is cancelled. Events after the start open the next round,
// so work that arrives during a run is never folded into the run that
// cannot see it.
//
// # Tokens and fencing
//
// Each round has a Token, random, carried by its job (with a Version that
// grows as the round is extended and published again). Start, Finish,
// CancelRound and the reaper name the token of the round they mean and
// change nothing when Redis holds another: a late or repeated job can never
// release, extend or cancel a round it does not belong to.
//
// # The life of a round
//
// Submit runs one Lua script against Redis per event it cannot answer
// locally (see Local joins): it opens the round or joins it and returns
// the Decision (OutcomeScheduled, OutcomeCoalesced, OutcomeExtended,
// OutcomePublished, OutcomeThrottled, OutcomeDuplicate or, with Redis down
// and Fail open, OutcomeBypassed). The event that opened a
// round publishes its job through the Publisher (package publisher: a
// JetStream message scheduled for the round's due time), then marks the
// round published; an event that finds a round still unpublished publishes
// it itself, idempotently, so every accepted event is in a published round.
// An extended round is published again with its new due time.
//
// A debounce round may instead wait in Redis until due (Config.Schedules,
// deferred.go): its opening writes the whole job (the round, its identity,
// an entry in its type's due list) in its one script call and publishes
// nothing; a Forwarder (every worker runs one, so does the daemon, and a
// Coalescer while rounds it opened wait) publishes its job when due. It is
// chosen with SchedulesRedis, on a single node or Sentinel whose Redis keeps
// its data (an append-only file, or replica acks); the default,
// SchedulesAuto, gives each round a JetStream schedule and forwards rounds
// other processes hold.
//
// When the job is delivered, the worker (package worker) calls Start: it
// takes the round out of Redis, returning its Summary (count, first and
// last seen, last args, accumulated items), and the job runs with them. A
// delivery that comes before an extended round is due finds it not due and
// waits for its later schedule.
//
// A round's data lives until its job starts, however long workers are
// away, bounded by the stream's retention (Config.MaxAge, the publisher's
// max_age, 7 days by default). The Reaper looks after what nothing else
// would close: rounds reserved whose producer died before publishing, and
// rounds whose message the stream no longer holds (it publishes them
// again from the round's identity).
//
// # Local joins
//
// An event of a round this Coalescer knows pending and published is answered
// without a Redis call where the answer cannot lose anything (debounce with
// payload first, fixed or extended; throttle without trailing; dedup until
// expiry), and added to its round by a flush within Config.FlushInterval
// that applies it only if the round's token is still there. Events whose
// round is gone by then are submitted again as ordinary events, except those
// answered as dropped (throttled, duplicate): no job was promised to them,
// and they stay dropped (LocalStats.Forgotten). The guarantee, exactly:
// without a crash, no accepted event is lost, whatever the clocks do; after
// a producer crash, the events it answered since its last flush are missing
// from their round's count but still covered by its job, provided every
// clock (producers, workers, Redis, NATS) is within Config.ClockSkew of
// every other and every process has the same DueSlack, because local answers
// stop DueSlack + ClockSkew + FlushInterval + 50 ms before the round can be
// taken (no layout's take takes a round that is not due) or expires. A flush
// that gets no reply (or has waited more than 50 ms for it, or is held back
// that long by Inspect's read) stops local answers until one does, and is
// sent again unchanged: its marker in Redis keeps its reply until a minute
// after the last of its rounds expires, so it applies once however late it
// is sent again (sent after that, it finds its rounds gone, and their events
// are submitted again and counted in LocalStats.Uncertain). Once its reply
// is in, the next flush deletes the marker; those of a process's last flush
// expire on their own. Call Flush before a producer stops: it returns when
// the events answered before the call are in Redis (or submitted again,
// their round gone), or when its context ends. Inspect and Explain send no
// flush: they show the round in Redis plus this process's local joins not
// yet flushed. local.go has the details; LocalStats counts what it did.
//
// # Replicas and failover
//
// Redis replicates asynchronously: a failover promotes a replica that may
// lack the last writes. With Config.Replication (on by default whenever the
// primary has a replica) every script call that decides an event, flushes
// local joins or takes a round at its job's start is followed, on the same
// connection, by WAIT for a replica's confirmation (replication.go); on a
// Cluster, per shard. An answered event is then on a replica too, and a
// round whose job started cannot come back pending after a failover. A wait
// that falls short is a doubt (ErrNotReplicated): refused under fail:
// closed (the event may be in its round all the same), counted under fail:
// open (Hooks.Replication). Without acks, a FailoverWatch notices a new
// primary within a Check and Reaper.Reconcile publishes again, at once, the
// job of every round past due whose message is gone.
//
// # Two layouts
//
// A round is one Redis key in one of two layouts, chosen by the policy
// once: a packed integer (dedup, throttle, debounce with a fixed window
// and payload first: about 120 bytes per pending round) or a hash
// (extend, payload last or accumulate, which must keep args or items).
// layout.go describes both bit by bit.
//
// # Errors
//
// Submit's errors match, with errors.Is, ErrInvalidEvent (an *EventError,
// with the field and code, for errors.As), ErrNoPolicy, ErrJobTooLarge,
// ErrStoreUnavailable (Redis down under Fail closed: nothing published) and
// ErrPublish (nothing accepted): retry those two, never the first three.
package debounce
