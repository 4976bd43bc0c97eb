package debounce

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Joins first. An event that goes to Redis opens its key's round or joins
// it, and open_round.lua takes the arguments of both (the opening's
// identity among them). Measured (issue 25), those arguments are a large
// part of a script call's cost in Redis, so while most Redis-bound events
// of a hash-layout type join rounds, the join goes out alone
// (join_round.lua, which shares open_round.lua's join, join_tail.lua), and
// a key with no round is opened by a second call; while most open, the
// opening script goes first as before. openGuess keeps the recent mix.

// openGuess says whether a type's Redis-bound events mostly open rounds or
// mostly join them: a count of each that halves as it grows, so it follows
// the recent mix.
type openGuess struct {
	opens, joins atomic.Int64
}

// opening: the next event is guessed to open a round.
func (g *openGuess) opening() bool { return g.opens.Load()+1 >= g.joins.Load() }

// seen records what an event's Redis decision was.
func (g *openGuess) seen(opened bool) {
	var n int64
	if opened {
		n = g.opens.Add(1)
	} else {
		n = g.joins.Add(1)
	}
	if n >= 1024 {
		g.opens.Store(g.opens.Load() / 2)
		g.joins.Store(g.joins.Load() / 2)
	}
}

// evaler is a script (*redis.Script), or a plain command sent like one
// (lastkey.go) through the batch queue.
type evaler interface {
	EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd
	Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd
}
