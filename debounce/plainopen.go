package debounce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The plain opening of a round held in Redis until due (deferred.go),
// payload first: an opening as plain commands in one MULTI ... EXEC, with
// no script. Measured (issue 25): a script call cost Redis ~6 µs more than
// the same commands sent plain, and a key of its own per identity (a hash
// with a TTL) ~3 µs more than a field in one hash per type, together the
// larger part of an opening. Plain commands cannot branch, so each one is
// written to do nothing where the round exists already:
//
//	SET round value NX GET PXAT expiry   open it, or read the pending one
//	ZADD due NX dueAt round              list it (no-op while listed)
//	HSETNX ids round <identity>          its identity, in the type's hash
//
// MULTI makes the three one write for AOF, replicas and a crash: a round is
// never stored without its listing and identity. The forwarder's first
// take of the round (forward_take.lua) moves its identity from the type's
// hash to the round's identity key, so that from then on the round is kept
// exactly as one opened by open_packed.lua (reaper, take and cancel read
// it there); a round cancelled or taken before it is forwarded leaves the
// field behind until its listing is claimed (gone: the field is dropped).
//
// When SET finds a round (the event joins one this process did not know),
// the rest changed nothing that matters: a listing re-added for a round
// already forwarded is claimed later and finds it taken, or publishes it
// again under a new version (superseded at its start); the identity
// written beside it is dropped when that listing is claimed (the identity
// key, written at the first forward, wins), and one beside a round opened
// with a JetStream schedule names another token and is dropped by the
// forwarder. The join itself then goes through open_packed.lua as before:
// one more round trip, so the plain opening is tried only while most of a
// type's Redis-bound events open rounds (openGuess).
type plainOpen struct{}

// plainOpenPacked is the plain opening's command list.
var plainOpenPacked plainOpen

// queue adds the opening to pipe and returns EXEC's reply: {SET's reply (nil:
// opened; the pending round's value), ZADD's, HSETNX's}. keys: round, due
// list, the type's identity hash; args: value, expiry, due time, identity.
func (plainOpen) queue(ctx context.Context, pipe redis.Pipeliner, keys []string, args []any) *redis.Cmd {
	pipe.Do(ctx, "multi")
	pipe.Do(ctx, "set", keys[0], args[0], "nx", "get", "pxat", args[1])
	pipe.Do(ctx, "zadd", keys[1], "nx", args[2], keys[0])
	pipe.Do(ctx, "hsetnx", keys[2], keys[0], args[3])
	return pipe.Do(ctx, "exec")
}

// EvalSha queues the opening on a pipeline (batch.go's evalPipelined).
func (o plainOpen) EvalSha(ctx context.Context, s redis.Scripter, keys []string, args ...any) *redis.Cmd {
	pipe, ok := s.(redis.Pipeliner)
	if !ok {
		return o.Run(ctx, s, keys, args...)
	}
	return o.queue(ctx, pipe, keys, args)
}

// Eval is EvalSha: there is no script to load.
func (o plainOpen) Eval(ctx context.Context, s redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return o.EvalSha(ctx, s, keys, args...)
}

// Run sends the opening on its own, one round trip.
func (o plainOpen) Run(ctx context.Context, s redis.Scripter, keys []string, args ...any) *redis.Cmd {
	if pipe, ok := s.(redis.Pipeliner); ok {
		return o.queue(ctx, pipe, keys, args)
	}
	pl, ok := s.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("plain opening: %T cannot pipeline", s))
		return cmd
	}
	pipe := pl.Pipeline()
	cmd := o.queue(ctx, pipe, keys, args)
	_, _ = pipe.Exec(ctx)
	return cmd
}

// plainOpenReply reads EXEC's reply: opened, or the value of the round
// found pending (joined: not opened by this call).
func plainOpenReply(cmd *redis.Cmd) (opened bool, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return false, err
	}
	if len(res) != 3 {
		return false, fmt.Errorf("plain opening: unexpected reply %v", res)
	}
	switch v := res[0].(type) {
	case nil:
		return true, nil
	case error:
		return false, v // WRONGTYPE: a round of the other layout
	case string:
		return false, nil
	}
	return false, fmt.Errorf("plain opening: unexpected SET reply %v", res[0])
}

// isUnsupported reports a server that refused the commands themselves
// (SET NX GET needs Redis 7.0): MULTI then ran nothing.
func isUnsupported(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "execabort") || strings.Contains(s, "syntax error") ||
		strings.Contains(s, "unknown command") || strings.Contains(s, "wrong number of arguments")
}

// openGuess says whether a type's Redis-bound events mostly open rounds
// (then the plain opening saves a script call each) or mostly join rounds
// this process did not know (then it would cost a round trip more): a
// count of each that halves as it grows, so it follows the recent mix.
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
