package debounce

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Calls of one kind and one type that meet in a pipeline (batch.go) go to
// Redis as one script call instead of one each, and each event gets the
// reply its own call would have given, decided in the order they came:
//
//   - held openings (open_packed.lua with a due list): open_held_many.lua;
//   - hash-layout joins sent first (join_round.lua): join_many.lua.
//
// Measured (issue 25, third pass): a script call costs Redis ~4.6 µs
// beyond its commands, more than half of a held opening or a join. Only on
// a single Redis node or Sentinel (a Cluster's keys of one call must share
// a slot). A lone call goes out as before, and so does every other call
// (idempotent ones among them: idempotent.lua records one decision).

var (
	//go:embed scripts/open_held_many.lua
	openHeldManyLua string
	//go:embed scripts/join_many.lua
	joinManyLuaFile string
	joinManyLua     = withFields(joinManyLuaFile)

	openHeldManyScript = redis.NewScript(withSeen(openHeldManyLua))
	joinManyScript     = redis.NewScript(strings.Replace(joinManyLua, "--JOIN--", joinTailLua, 1))
)

// heldArgs and joinArgs are how many arguments open_packed.lua takes for
// a held round and join_round.lua for a join.
const (
	heldArgs = 6
	joinArgs = 6
)

// mergeName names the shared call a call can join: for held openings the
// type's due list and identity hash; for joins the type's due list (""
// when its rounds are not held) and the policy's arguments join_round.lua
// takes for every event (int64 and string values, comparable). A struct
// rather than an interface: boxing one allocated, once per call.
type mergeName struct {
	list, ids                          string
	extend, maxWait, payload, maxItems any
}

// mergeGroup is one shared call and the calls it stands for.
type mergeGroup struct {
	call    *scriptCall
	members []*scriptCall
}

// mergeKind says which calls a shared call can stand for, and builds it.
type mergeKind struct {
	// group names the shared call sc can join, ok false when none.
	group func(sc *scriptCall) (name mergeName, ok bool)
	// start makes the shared call from its first member, with room for
	// the keys and arguments of n members; add appends a member's.
	start func(sc *scriptCall, n int) *scriptCall
	add   func(shared, sc *scriptCall)
}

var mergeKinds = []mergeKind{
	{ // held openings of one type: its due list and identity hash
		group: func(sc *scriptCall) (mergeName, bool) {
			s, ok := sc.script.(*redis.Script)
			if !ok || s != openPackedScript || len(sc.keys) != 3 || len(sc.args) != heldArgs {
				return mergeName{}, false
			}
			return mergeName{list: sc.keys[1], ids: sc.keys[2]}, true
		},
		start: func(sc *scriptCall, n int) *scriptCall {
			keys := append(make([]string, 0, 2+n), sc.keys[1], sc.keys[2])
			return &scriptCall{script: openHeldManyScript, keys: keys, args: make([]any, 0, n*heldArgs)}
		},
		add: func(shared, sc *scriptCall) {
			shared.keys = append(shared.keys, sc.keys[0])
			shared.args = append(shared.args, sc.args...)
		},
	},
	{ // joins of one policy: its due list (if any) and its settings
		group: func(sc *scriptCall) (mergeName, bool) {
			s, ok := sc.script.(*redis.Script)
			if !ok || s != joinRoundScript || len(sc.keys) < 1 || len(sc.keys) > 2 || len(sc.args) != joinArgs {
				return mergeName{}, false
			}
			n := mergeName{extend: sc.args[1], maxWait: sc.args[2], payload: sc.args[3], maxItems: sc.args[5]}
			if len(sc.keys) == 2 {
				n.list = sc.keys[1]
			}
			return n, true
		},
		start: func(sc *scriptCall, n int) *scriptCall {
			args := append(make([]any, 0, 5+2*n), "0", sc.args[1], sc.args[2], sc.args[3], sc.args[5])
			shared := &scriptCall{script: joinManyScript, keys: make([]string, 0, 1+n), args: args}
			if len(sc.keys) == 2 {
				shared.keys, shared.args[0] = append(shared.keys, sc.keys[1]), "1"
			}
			return shared
		},
		add: func(shared, sc *scriptCall) {
			shared.keys = append(shared.keys, sc.keys[0])
			shared.args = append(shared.args, sc.args[0], sc.args[4])
		},
	},
}

// merge returns the calls to send, where two or more calls of one kind and
// group share one call, and what hands the shared calls' replies back to
// their members once they are sent.
//
// A pipeline holds a few groups (most often one type's joins or held
// openings), so they are found by comparing names in a short list rather
// than in maps keyed by interfaces, whose hashing of each name's fields
// was most of merge's cost (CPU profile, payload last at 50 in flight).
func (b *batcher) merge(ctx context.Context, calls []*scriptCall) ([]*scriptCall, func()) {
	if len(calls) < 2 {
		return calls, func() {}
	}
	if _, ok := b.rdb.(*redis.Client); !ok {
		return calls, func() {} // Cluster, Ring: one call each
	}
	type group struct {
		name mergeName
		kind int
		n    int
		g    *mergeGroup
	}
	var groupsRoom [8]group
	groups := groupsRoom[:0]
	var inRoom [64]int32
	in := inRoom[:0] // each call's group, -1 for none
	if len(calls) > len(inRoom) {
		in = make([]int32, 0, len(calls))
	}
	shared := false
	for _, sc := range calls {
		at := int32(-1)
		for k, kind := range mergeKinds {
			name, ok := kind.group(sc)
			if !ok {
				continue
			}
			for i := range groups {
				if groups[i].kind == k && groups[i].name == name {
					at = int32(i)
					break
				}
			}
			if at < 0 {
				at = int32(len(groups))
				groups = append(groups, group{name: name, kind: k})
			}
			groups[at].n++
			shared = shared || groups[at].n == 2
			break
		}
		in = append(in, at)
	}
	if !shared {
		return calls, func() {}
	}
	var order []*mergeGroup
	send := make([]*scriptCall, 0, len(calls))
	for i, sc := range calls {
		at := in[i]
		if at < 0 || groups[at].n < 2 {
			send = append(send, sc)
			continue
		}
		gr := &groups[at]
		kind := mergeKinds[gr.kind]
		if gr.g == nil {
			// The shared call takes its first member's place.
			gr.g = &mergeGroup{call: kind.start(sc, gr.n), members: make([]*scriptCall, 0, gr.n)}
			order = append(order, gr.g)
			send = append(send, gr.g.call)
		}
		gr.g.members = append(gr.g.members, sc)
		kind.add(gr.g.call, sc)
		b.merged[gr.kind].Add(1)
	}
	return send, func() {
		for _, g := range order {
			g.split(ctx)
		}
	}
}

// split gives each member its reply from the shared call's: its value or
// its error; the call's error and its replication doubt go to every
// member.
func (g *mergeGroup) split(ctx context.Context) {
	var replies []any
	var err error
	switch {
	case g.call.cmd == nil:
		err = fmt.Errorf("shared script call: not sent")
	default:
		err = g.call.cmd.Err()
	}
	if err == nil {
		var ok bool
		if replies, ok = g.call.cmd.Val().([]any); !ok || len(replies) != len(g.members) {
			err = fmt.Errorf("shared script call: %d replies for %d events", len(replies), len(g.members))
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
