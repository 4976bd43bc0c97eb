package debounce

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Payload last, joined with one plain command. A debounce round with
// payload last (fixed window) keeps its latest args twice: in its hash
// (field a, as every hash round) and in a payload key of its own, the
// round's key with "a" and its token (same hash tag, same slot), created
// with the round (open_round.lua, "last+") and expiring with it. A
// producer that knows the round pending (local.go: it opened or learned
// it) joins an event by writing the event's args there with SET XX — one
// plain command, no script: measured (issue 25) a script call costs Redis
// ~6 µs more than its commands, the larger part of a join. XX makes it
// conditional on the round: every script that closes a round deletes its
// payload key with it (take_round.lua, reap.lua; the take first copies it
// into the round, so the job's summary and its retries carry it), and a
// round that expired took its key along (same expiry), so a SET XX that
// succeeds wrote into the pending round of that token, before any take:
// the job starts after the event and runs with its args or later ones. A
// SET XX that finds no key sends the event to Redis as an ordinary event
// (the round was taken, cancelled or replaced, or was opened by an older
// version without a payload key).
//
// The event's count and last-seen time are added by the next flush, as a
// local join's (flush_round.lua); should the flush find the round gone,
// they are dropped and the event is not submitted again: its args were in
// the round before it closed. A producer crash loses the counts of its
// last flush interval, never args. Scripts that join the round (another
// producer's, or an older version's) write the payload key too (SET XX
// KEEPTTL in join_tail.lua), so it always holds the latest args.
//
// Opt-in (Policy.LocalJoins "on"): a producer of a version before payload
// keys joins with a script that writes the round's hash alone, and a
// worker before them takes the round without its payload key, so every
// producer and worker of the type must run this version with this
// setting. Single-node or Sentinel Redis only: the scripts compute the
// payload key's name from the round's token rather than declare it
// (same hash tag, but a Cluster's resharding moves keys one by one). Not
// for extend (the event moves the due time, which a plain write cannot),
// nor with replication acks on (a SET XX's doubt needs the script path's
// handling): those go through join_round.lua.

// payloadKey is a hash round's payload key (its latest args).
func payloadKey(rkey string, token Token) string {
	return rkey + "a" + strconv.FormatUint(uint64(token), 10)
}

// lastKeyed says whether a policy's rounds get a payload key: local_joins
// on (a fixed-window debounce with payload last, policy.go checks).
func (p *compiled) lastKeyed() bool {
	return p.LocalJoins == LocalJoinsOn && p.Mode == ModeDebounce && p.Payload == PayloadLast && !p.Extend
}

// setXX is a plain SET key value XX sent like a script call (batch.go):
// args: the value, or one *setXXCall (writeLast) that holds the whole
// command.
type setXX struct{}

var plainSetXX setXX

// setXXCall is one SET XX KEEPTTL of a payload key, its keys and arguments
// in one allocation: the key and the value by reference (callargs.go) on a
// client that sends every command to one server, where payload keys are
// allowed (a Cluster refuses local_joins on). Built as go-redis's variadic
// calls build it, the write cost seven allocations more per event: the
// payload key's text, its boxing, the value's, the key slice and two
// argument slices.
type setXXCall struct {
	keys [1]string
	self [1]any // the batch call's arguments: the call itself
	argv [5]any // the command
	key  strRef
	val  bytesRef
}

// newSetXX builds the write of args to the payload key pkey; byRef: the
// key goes by reference (a *redis.Client), else as its text.
func newSetXX(pkey string, args []byte, byRef bool) *setXXCall {
	sc := &setXXCall{keys: [1]string{pkey}, key: strRef(pkey), val: args}
	sc.self[0] = sc
	var k any = &sc.key
	if !byRef {
		k = pkey
	}
	// KEEPTTL: a SET without it would drop the key's expiry (the round's).
	sc.argv = [5]any{"set", k, &sc.val, "xx", "keepttl"}
	return sc
}

// command is the SET of keys and args as a batch call gives them.
func (setXX) command(keys []string, args []any) []any {
	if sc, ok := args[0].(*setXXCall); ok && len(args) == 1 {
		return sc.argv[:]
	}
	return []any{"set", keys[0], args[0], "xx", "keepttl"}
}

func (s setXX) queue(ctx context.Context, pipe redis.Pipeliner, keys []string, args []any) *redis.Cmd {
	return pipe.Do(ctx, s.command(keys, args)...)
}

func (s setXX) EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.Run(ctx, c, keys, args...)
}

func (s setXX) Eval(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.Run(ctx, c, keys, args...)
}

func (s setXX) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	if pipe, ok := c.(redis.Pipeliner); ok {
		return s.queue(ctx, pipe, keys, args)
	}
	if d, ok := c.(interface {
		Do(ctx context.Context, args ...any) *redis.Cmd
	}); ok {
		return d.Do(ctx, s.command(keys, args)...)
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errors.New("set xx: the client cannot send commands"))
	return cmd
}

// writeLast writes an event's args into the payload key of the round of
// token: true when it did (the round is pending), false when the key is
// gone. A write its replicas did not confirm (acks switched on since the
// caller looked) is an error: the event goes through the script, which
// handles the doubt (it writes the args again, no harm for payload last).
// pkey is the round's payload key (localRound.pkey: made once per round).
func (c *Coalescer) writeLast(ctx context.Context, pkey string, args []byte) (bool, error) {
	_, byRef := c.rdb.(*redis.Client)
	sc := newSetXX(pkey, args, byRef)
	cmd, doubt := c.evalDoubt(ctx, plainSetXX, sc.keys[:], sc.self[:]...)
	if doubt != nil {
		return false, doubt
	}
	err := cmd.Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
