package debounce

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Held openings that meet in one pipeline go to Redis as one script call
// per type (open_held_many.lua) instead of one call each: the events of a
// batch (batch.go) that open_packed.lua would decide one by one as held
// rounds of one type — the same due list and identity hash — are decided
// by one call, in the order they came, each with the reply it would have
// had alone. Measured (issue 25, third pass): a script call costs Redis
// ~4.6 µs beyond its commands, more than half of a held opening.
//
// Only where rounds are held: a single Redis node or Sentinel (never a
// Cluster, whose keys of one call must share a slot). A lone call goes out
// as before (batch.go), and so does a call with an idempotency key (its
// record is written by idempotent.lua around one decision).

//go:embed scripts/open_held_many.lua
var openHeldManyLua string

var openHeldManyScript = redis.NewScript(openHeldManyLua)

// heldArgs is how many arguments open_packed.lua takes for a held round,
// and open_held_many.lua per event.
const heldArgs = 6

// heldGroup is one open_held_many.lua call and the calls it stands for.
type heldGroup struct {
	call    *scriptCall
	members []*scriptCall
}

// mergeHeld returns the calls to send, with the held openings of each type
// merged into one call where there are two or more, and what hands the
// merged calls' replies back to their members once they are sent.
func (b *batcher) mergeHeld(ctx context.Context, calls []*scriptCall) ([]*scriptCall, func()) {
	if len(calls) < 2 {
		return calls, func() {}
	}
	if _, ok := b.rdb.(*redis.Client); !ok {
		return calls, func() {} // Cluster, Ring: one call each
	}
	held := 0
	for _, sc := range calls {
		if isHeldOpening(sc) {
			held++
		}
	}
	if held < 2 {
		return calls, func() {}
	}
	byType := map[string]*heldGroup{} // by due list and identity hash
	var groups []*heldGroup
	for _, sc := range calls {
		if !isHeldOpening(sc) {
			continue
		}
		k := sc.keys[1] + "\x00" + sc.keys[2]
		g := byType[k]
		if g == nil {
			g = &heldGroup{call: &scriptCall{script: openHeldManyScript, keys: []string{sc.keys[1], sc.keys[2]}}}
			byType[k] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, sc)
		g.call.keys = append(g.call.keys, sc.keys[0])
		g.call.args = append(g.call.args, sc.args...)
	}
	// In the pipeline, a merged call takes its first member's place; a
	// type with one held opening in the batch sends it as it came.
	send := make([]*scriptCall, 0, len(calls))
	for _, g := range groups {
		if len(g.members) > 1 {
			b.merged.Add(int64(len(g.members)))
		}
	}
	for _, sc := range calls {
		if !isHeldOpening(sc) {
			send = append(send, sc)
			continue
		}
		g := byType[sc.keys[1]+"\x00"+sc.keys[2]]
		switch {
		case len(g.members) == 1:
			send = append(send, sc)
		case g.members[0] == sc:
			send = append(send, g.call)
		}
	}
	return send, func() {
		for _, g := range groups {
			if len(g.members) > 1 {
				g.split(ctx)
			}
		}
	}
}

// isHeldOpening reports whether sc is open_packed.lua deciding a held round
// (its three keys: the round, the type's due list, its identity hash).
func isHeldOpening(sc *scriptCall) bool {
	s, ok := sc.script.(*redis.Script)
	return ok && s == openPackedScript && len(sc.keys) == 3 && len(sc.args) == heldArgs
}

// split gives each member the reply open_packed.lua would have given it:
// OPENED, {JOINED, value, expiry}, or its error; the call's error and its
// replication doubt go to every member.
func (g *heldGroup) split(ctx context.Context) {
	var replies []any
	err := g.call.cmd.Err()
	if err == nil {
		var ok bool
		if replies, ok = g.call.cmd.Val().([]any); !ok || len(replies) != len(g.members) {
			err = fmt.Errorf("open_held_many: %d replies for %d events", len(replies), len(g.members))
		}
	}
	for i, m := range g.members {
		m.cmd = redis.NewCmd(ctx)
		m.doubt = g.call.doubt
		switch {
		case err != nil:
			m.cmd.SetErr(err)
		default:
			if e, isErr := replies[i].(error); isErr {
				m.cmd.SetErr(e)
			} else {
				m.cmd.SetVal(replies[i])
			}
		}
	}
}
