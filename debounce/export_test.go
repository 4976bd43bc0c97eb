package debounce

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

// RoundRedisKey is the Redis key of a job's round.
func RoundRedisKey(c *Coalescer, job Job) string { return c.jobRedisKey(job) }

// JoinsFirst reports whether c now sends a join of typ's hash-layout rounds
// first, without the opening's arguments (join_round.lua).
func JoinsFirst(c *Coalescer, typ string) bool { return !c.policies[typ].guess.opening() }
