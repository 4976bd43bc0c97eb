package vredis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/internal/vredis"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// clock is a virtual clock a test moves.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// TestExpiryFollowsTheVirtualClock: a key with expiry T is there at T and
// gone after it (Redis 7), whatever the wall clock does.
func TestExpiryFollowsTheVirtualClock(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.UnixMilli(1_700_000_000_000)}
	s := vredis.New(c.Now)
	defer s.Close()
	rdb := s.Client()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.Do("pexpiretime", "k"); got != int64(1_700_000_010_000) {
		t.Fatalf("PEXPIRETIME = %v", got)
	}
	c.Advance(10 * time.Second)
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("at its expiry: %q %v, want the value", v, err)
	}
	if got := s.Do("pttl", "k"); got != int64(0) {
		t.Fatalf("PTTL at expiry = %v, want 0", got)
	}
	c.Advance(time.Millisecond)
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after its expiry: %v, want redis.Nil", err)
	}
	// Keys nobody reads are removed too, as time passes.
	for i := range 2000 {
		rdb.Set(ctx, fmt.Sprint("short", i), 1, time.Second)
		rdb.Set(ctx, fmt.Sprint("long", i), 1, time.Hour)
	}
	c.Advance(2 * time.Second)
	if n := s.Keys(); n != 2000 {
		t.Fatalf("%d keys after the short ones expired, want 2000", n)
	}
	if st := s.Stats(); st.Expired < 2000 {
		t.Fatalf("stats %+v", st)
	}
}

// TestScriptsAndPipelines runs a script through go-redis (EVALSHA, then
// EVAL on NOSCRIPT, as Script.Run does) and a MULTI/EXEC pipeline.
func TestScriptsAndPipelines(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.UnixMilli(1_700_000_000_000)}
	s := vredis.New(c.Now)
	defer s.Close()
	rdb := s.Client()
	ctx := context.Background()
	sc := redis.NewScript(`
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TYPE', KEYS[1]).ok
local missing = redis.call('GET', KEYS[2])
local e = redis.pcall('HGET', KEYS[1], 'f')
return {n, t, tostring(missing), e.err ~= nil and 1 or 0, redis.call('PTTL', KEYS[1])}`)
	res, err := sc.Run(ctx, rdb, []string{"n", "absent"}, 5, 1500).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{int64(5), "string", "false", int64(1), int64(1500)}; !reflect.DeepEqual(res, want) {
		t.Fatalf("script = %#v, want %#v", res, want)
	}
	if st := s.Stats(); st.Scripts != 2 { // EVALSHA (NOSCRIPT), then EVAL
		t.Fatalf("script calls %d, want 2", st.Scripts)
	}
	if _, err := sc.Run(ctx, rdb, []string{"n", "absent"}, 1, 1500).Slice(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Scripts != 3 { // cached: EVALSHA alone
		t.Fatalf("script calls %d, want 3", st.Scripts)
	}
	cmds, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", "1", 0)
		p.Incr(ctx, "a")
		p.Del(ctx, "n")
		return nil
	})
	if err != nil || len(cmds) != 3 || cmds[1].(*redis.IntCmd).Val() != 2 || cmds[2].(*redis.IntCmd).Val() != 1 {
		t.Fatalf("pipeline: %v %v", cmds, err)
	}
	// A script error keeps the error's code (the Coalescer looks for WRONGTYPE).
	rdb.HSet(ctx, "h", "f", "v")
	err = redis.NewScript(`return redis.call('GET', KEYS[1])`).Run(ctx, rdb, []string{"h"}).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("GET on a hash in a script: %v, want WRONGTYPE", err)
	}
	// A command it does not implement is named.
	if err := rdb.Do(ctx, "XADD", "s", "*", "f", "v").Err(); err == nil || !strings.Contains(err.Error(), "unknown command 'xadd'") {
		t.Fatalf("XADD: %v", err)
	}
	// A done context sends nothing, as a real client.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := rdb.Set(cctx, "x", 1, 0).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("SET on a done context: %v", err)
	}
	if n := rdb.Exists(ctx, "x").Val(); n != 0 {
		t.Fatalf("the SET on a done context was applied")
	}
}

// TestSameRepliesAsRedis sends the same random commands to a real
// redis-server and to vredis (on real time, like the server) and compares
// every reply: the commands coalesce's scripts use, in Lua and outside.
func TestSameRepliesAsRedis(t *testing.T) {
	t.Parallel()
	real := testenv.SharedRedis(t).Client(t)
	v := vredis.New(time.Now)
	defer v.Close()
	fake := v.Client()
	prefix := testenv.Prefix(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{prefix + "{t}a", prefix + "{t}b", prefix + "{t}h", prefix + "{t}i"}
	key := func() string { return keys[rng.IntN(len(keys))] }
	far := time.Now().Add(time.Hour).UnixMilli()
	num := func() string { return fmt.Sprint(rng.IntN(2000) - 200) }
	// Replies that depend on the moment (PTTL) are compared within a
	// tolerance; everything else exactly.
	gen := func() ([]any, bool) {
		switch rng.IntN(22) {
		case 0:
			return []any{"set", key(), num()}, false
		case 1:
			return []any{"set", key(), num(), "nx"}, false
		case 2:
			return []any{"set", key(), num(), "pxat", far + int64(rng.IntN(1000))}, false
		case 3:
			return []any{"set", key(), num(), "xx", "get"}, false
		case 4:
			return []any{"get", key()}, false
		case 5:
			return []any{"incrby", key(), num()}, false
		case 6:
			return []any{"del", key(), key()}, false
		case 7:
			return []any{"exists", key(), key()}, false
		case 8:
			return []any{"type", key()}, false
		case 9:
			return []any{"pexpireat", key(), far + int64(rng.IntN(1000))}, false
		case 10:
			return []any{"pexpire", key(), 3_600_000}, false
		case 11:
			return []any{"pttl", key()}, true
		case 12:
			return []any{"pexpiretime", key()}, true // after a PEXPIRE: each server's clock
		case 13:
			return []any{"hset", key(), "f" + num(), num(), "g", num()}, false
		case 14:
			return []any{"hget", key(), "g"}, false
		case 15:
			return []any{"hmget", key(), "g", "f1", "nope"}, false
		case 16:
			return []any{"hincrby", key(), "n", num()}, false
		case 17:
			return []any{"hsetnx", key(), "g", num()}, false
		case 18:
			return []any{"rename", key(), key()}, false
		case 19:
			return []any{"persist", key()}, false
		case 20:
			return []any{"hlen", key()}, false
		}
		return []any{"hdel", key(), "g", "f1"}, false
	}
	// The same commands from a script: replies converted to Lua and back.
	script := redis.NewScript(`
local args = {}
for i = 2, #ARGV do args[#args + 1] = ARGV[i] end
local r = redis.pcall(ARGV[1], unpack(args))
if type(r) == 'table' and r.err then return 'ERR:' .. string.sub(r.err, 1, 9) end
if type(r) == 'table' and r.ok then return 'OK:' .. r.ok end
if r == false then return 'nil' end
return r`)
	for i := range 3000 {
		args, timed := gen()
		viaScript := rng.IntN(3) == 0
		var a, b any
		var errA, errB error
		if viaScript {
			k := args[1].(string)
			rest := append([]any{args[0]}, k)
			rest = append(rest, args[2:]...)
			// Keys go through ARGV here: a test of the reply conversion.
			a, errA = script.Run(ctx, real, []string{k}, rest...).Result()
			b, errB = script.Run(ctx, fake, []string{k}, rest...).Result()
		} else {
			a, errA = real.Do(ctx, args...).Result()
			b, errB = fake.Do(ctx, args...).Result()
		}
		if (errA == nil) != (errB == nil) || errA != nil && firstWord(errA) != firstWord(errB) {
			t.Fatalf("step %d %v (script %v): redis error %v, vredis error %v", i, args, viaScript, errA, errB)
		}
		if timed {
			na, _ := a.(int64)
			nb, _ := b.(int64)
			if (na < 0) != (nb < 0) || na >= 0 && abs(na-nb) > 2000 || na < 0 && na != nb {
				t.Fatalf("step %d %v: redis %v, vredis %v", i, args, a, b)
			}
			continue
		}
		if !sameReply(a, b) {
			t.Fatalf("step %d %v (script %v): redis %#v, vredis %#v", i, args, viaScript, a, b)
		}
	}
}

func firstWord(err error) string {
	w, _, _ := strings.Cut(err.Error(), " ")
	return w
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// sameReply compares replies; arrays of pairs (HGETALL) and unordered
// members compare as sorted.
func sameReply(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	la, okA := a.([]any)
	lb, okB := b.([]any)
	if !okA || !okB || len(la) != len(lb) {
		return false
	}
	sa, sb := fmt.Sprint(la...), fmt.Sprint(lb...)
	fa, fb := strings.Fields(sa), strings.Fields(sb)
	slices.Sort(fa)
	slices.Sort(fb)
	return slices.Equal(fa, fb)
}
