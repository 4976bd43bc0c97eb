package debounce

import (
	"math/rand/v2"
	"sync/atomic"
)

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
// time in gateRate goes cold: from then on one event in gateSample tries
// locally (learning its round, as before) and the others go to Redis as with
// local joins off, which is always correct (an event that skips its local
// round joins it in Redis). Once the sampled events are answered locally one
// time in gateRate again, every event tries again: a storm that starts on a
// cold type is answered locally after a few thousand of its events. Types
// with local_joins: on are never gated: their user asked for it.
//
// The measurement samples too: one try in gateSample (by a per-thread random
// number) is recorded while warm, every admitted one while cold, and a
// measurement is gateWindow/gateSample records (about gateWindow events
// while warm). Counting every try in shared counters cost a storm 12-16% of
// its throughput at 50 in flight on 2 cores (the counters' cache line moving
// between them at 700k events/s).

const (
	gateWindow = 4096 // events per measurement while warm (about)
	gateSample = 16   // while cold, one event in gateSample tries
	gateRate   = 32   // cold below one local answer in gateRate tries
)

// localGate measures how often a type's events are answered locally.
type localGate struct {
	records, hits atomic.Int64 // in the current measurement
	cold          atomic.Bool  // few events are answered locally
	skipped       *atomic.Uint64
}

// admit says whether an event tries a local join; when not, it is counted
// as skipped.
func (g *localGate) admit() bool {
	if !g.cold.Load() || rand.Uint32N(gateSample) == 0 {
		return true
	}
	g.skipped.Add(1)
	return false
}

// record takes what an admitted event's local try gave: answered locally
// or not. At the end of a measurement it decides the next one's state.
func (g *localGate) record(hit bool) {
	if !g.cold.Load() && rand.Uint32N(gateSample) != 0 {
		return // warm: one try in gateSample is measured
	}
	if hit {
		g.hits.Add(1)
	}
	n := g.records.Add(1)
	if n < gateWindow/gateSample || !g.records.CompareAndSwap(n, 0) {
		return // measuring; or another event's record came in between: its turn
	}
	g.cold.Store(g.hits.Swap(0)*gateRate < n)
}
