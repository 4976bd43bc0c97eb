package debounce

import "sync/atomic"

// The local-join gate. A local join answers an event without a Redis call
// when this process knows its round, but it costs every event of the type
// its bookkeeping: a lookup in a map as large as the rounds remembered, and
// on a miss an entry, a channel, learning the round from Redis's answer and
// sweeping it later. Where events seldom meet a round this process knows
// (every event a new key: "schedule one job per user"), that is all cost:
// measured (issue 25, fifth pass; coalesce bench, every event a new key)
// the producer spent 26.5 µs of CPU per event at 50 in flight with local
// joins and 21.3 µs without (throughput +11%), 86 and 78 µs at 1 in flight
// (+10%).
//
// So a type whose events tried locally are answered there less than one
// time in gateRate over gateWindow tries goes cold: from then on one event
// in gateSample tries locally (learning its round, as before) and the others
// go to Redis as with local joins off, which is always correct (an event
// that skips its local round joins it in Redis). The sampled events keep
// measuring: once their rate is back above one in gateRate, over
// gateWindow/gateSample tries, every event tries again. A storm that starts
// on a cold type is answered locally after about gateWindow of its events.
// Types with local_joins: on are never gated: their user asked for it.

const (
	gateWindow = 4096 // tries per measurement while warm
	gateSample = 16   // while cold, one event in gateSample tries
	gateRate   = 32   // cold below one local answer in gateRate tries
)

// localGate measures how often a type's events are answered locally.
type localGate struct {
	tries, hits atomic.Int64  // in the current measurement
	cold        atomic.Bool   // few events are answered locally
	n           atomic.Uint64 // events seen while cold (the sampling)
	skipped     *atomic.Uint64
}

// admit says whether an event tries a local join; when not, it is counted
// as skipped.
func (g *localGate) admit() bool {
	if !g.cold.Load() || g.n.Add(1)%gateSample == 0 {
		return true
	}
	g.skipped.Add(1)
	return false
}

// record takes what an admitted event's local try gave: answered locally
// or not. At the end of a measurement it decides the next one's state.
func (g *localGate) record(hit bool) {
	if hit {
		g.hits.Add(1)
	}
	window := int64(gateWindow)
	if g.cold.Load() {
		window /= gateSample
	}
	t := g.tries.Add(1)
	if t < window || !g.tries.CompareAndSwap(t, 0) {
		return // measuring; or another event's try came in between: its turn
	}
	g.cold.Store(g.hits.Swap(0)*gateRate < t)
}
