package debounce

import "time"

// SeenRoundTrip is what a packed round's last-seen field keeps of an offset
// of ms after the round's base: tests compare the scripts' encoding with it.
func SeenRoundTrip(ms int64) int64 { return decodeSeen(encodeSeen(ms)) }

// HoldFlushes stops the background flusher of c's local joins until the
// returned func is called (Flush still flushes): a test can then put a take
// or a cancel between a local join and its flush.
func HoldFlushes(c *Coalescer) (release func()) {
	c.local.held.Store(true)
	return func() { c.local.held.Store(false) }
}

// StarveFlusher makes c's background flusher skip its flushes, as one that
// gets no CPU would, until the returned func is called; unlike HoldFlushes,
// a submitting goroutine may still flush for it (assistFlush).
func StarveFlusher(c *Coalescer) (release func()) {
	c.local.starved.Store(true)
	return func() { c.local.starved.Store(false) }
}

// HoldBatch makes c's Redis calls wait in its batch queue, one sender
// taking them, until release: queued(n) waits until n calls are under way;
// released, they go out in one pipeline (batch.go, merge.go).
func HoldBatch(c *Coalescer) (queued func(n int) bool, release func()) {
	gate := make(chan struct{})
	c.batch.max.Store(1)
	c.batch.gate.Store(&gate)
	queued = func(n int) bool {
		for range 2000 {
			if int(c.batch.inflight.Load()) >= n {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	return queued, func() {
		c.batch.gate.Store(nil)
		close(gate)
	}
}

// HeldMerged is how many held openings c has decided in a call shared
// with others of their type (merge.go).
func HeldMerged(c *Coalescer) int64 { return c.batch.merged[0].Load() }

// JoinsMerged is how many hash-layout joins c has decided in a call shared
// with others of their policy (merge.go).
func JoinsMerged(c *Coalescer) int64 { return c.batch.merged[1].Load() }

// RoundRedisKey is the Redis key of a job's round.
func RoundRedisKey(c *Coalescer, job Job) string { return c.jobRedisKey(job) }

// JoinsFirst reports whether c now sends a join of typ's hash-layout rounds
// first, without the opening's arguments (join_round.lua).
func JoinsFirst(c *Coalescer, typ string) bool { return !c.policies[typ].guess.opening() }

// The local-join gate's measurement (localgate.go).
const (
	GateWindow = gateWindow
	GateSample = gateSample
)
