// Package vredis is an in-process Redis on a virtual clock, for simulations:
// a go-redis client whose hook answers every command from an in-memory
// keyspace, runs the Lua scripts it is sent with gopher-lua (each compiled
// once, on one reused Lua state), and expires keys by a clock the caller
// moves. It implements the commands coalesce's scripts and Redis calls use
// (strings, hashes, expiry, EVAL/EVALSHA, MULTI/EXEC pipelines) and answers
// any other with an error naming it.
//
// Expiry follows Redis 7: a key with expiry T (PEXPIRETIME) exists while the
// clock is at or before T, and is gone after it.
package vredis

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one in-memory keyspace. It is safe for concurrent use, but a
// simulation drives it from one goroutine.
type Server struct {
	mu      sync.Mutex
	now     func() time.Time
	keys    map[string]*value
	expiry  expiryHeap
	lua     *luaEngine
	scripts map[string]*script // by SHA-1 (hex)
	stats   Stats
	closed  bool
	// SCAN cursors: each stands for the last key it returned.
	cursors   map[uint64]string
	cursorSeq uint64
}

// Stats counts what a Server did.
type Stats struct {
	Commands int64 // commands run, those in scripts included
	Scripts  int64 // script calls (EVAL, EVALSHA)
	Expired  int64 // keys removed because their expiry passed
}

// value is one key's value: a string or a hash, and its expiry.
type value struct {
	str    string
	hash   map[string]string
	isHash bool
	exp    int64 // unix ms; 0: none
}

// New returns an empty keyspace whose clock is now (required).
func New(now func() time.Time) *Server {
	s := &Server{now: now, keys: make(map[string]*value), scripts: make(map[string]*script), cursors: map[uint64]string{}}
	s.lua = newLuaEngine(s)
	return s
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Keys returns how many keys exist now.
func (s *Server) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.nowMs())
	return len(s.keys)
}

// Close releases the Lua state.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.lua.close()
	}
}

// Client returns a go-redis client answered by this keyspace. It never
// touches the network; MaxRetries is -1, as coalesce asks of its clients.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "vredis:0", MaxRetries: -1, DisableIdentity: true})
	c.AddHook(hook{s})
	return c
}

func (s *Server) nowMs() int64 { return s.now().UnixMilli() }

// Do runs one command (its arguments as go-redis would send them) and
// returns its reply: int64, string, nil (a nil reply), Status, []any or an
// error.
func (s *Server) Do(args ...any) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.top(args)
}

// top runs a command from a client (not from a script): expired keys are
// removed first.
func (s *Server) top(args []any) any {
	if s.closed {
		return errReply("ERR vredis: the keyspace is closed")
	}
	s.expire(s.nowMs())
	if len(args) == 0 {
		return errReply("ERR empty command")
	}
	name, _ := args[0].(string) // go-redis sends names in lower case
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "script":
	default:
		name = strings.ToLower(argString(args[0]))
	}
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		return s.eval(name, args[1:])
	case "script":
		return s.scriptCmd(args[1:])
	}
	str := make([]string, len(args))
	for i, a := range args {
		str[i] = argString(a)
	}
	return s.command(str)
}

// Status is a status reply (OK, PONG, a type name).
type Status string

// errReply is an error reply, as Redis sends it ("ERR ...", "WRONGTYPE ...").
type errReply string

func (e errReply) Error() string { return string(e) }

// RedisError marks it as a server's error reply for go-redis.
func (e errReply) RedisError() {}

// expire removes the keys whose expiry passed.
func (s *Server) expire(now int64) {
	for len(s.expiry) > 0 && s.expiry[0].at < now {
		e := heap.Pop(&s.expiry).(expiryEntry)
		if v, ok := s.keys[e.key]; ok && v.exp == e.at {
			delete(s.keys, e.key)
			s.stats.Expired++
		}
	}
}

// setExpiry sets a key's expiry (0: none).
func (s *Server) setExpiry(key string, v *value, at int64) {
	v.exp = at
	if at == 0 {
		return
	}
	heap.Push(&s.expiry, expiryEntry{at: at, key: key})
	if len(s.expiry) > 1024 && len(s.expiry) > 4*len(s.keys) {
		s.compactExpiry()
	}
}

// compactExpiry rebuilds the expiry heap from the live keys: entries of
// keys deleted or given another expiry since pile up otherwise (a round
// deleted at its job's start leaves its entry, due days later).
func (s *Server) compactExpiry() {
	h := s.expiry[:0]
	for k, v := range s.keys {
		if v.exp != 0 {
			h = append(h, expiryEntry{at: v.exp, key: k})
		}
	}
	clear(s.expiry[len(h):cap(s.expiry)])
	s.expiry = h
	heap.Init(&s.expiry)
}

// expiryEntry is a key's expiry as it was set; one whose key has another
// expiry since is skipped when it comes up.
type expiryEntry struct {
	at  int64
	key string
}

type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// hook answers a go-redis client's commands from the keyspace.
type hook struct{ s *Server }

var errNoNetwork = errors.New("vredis: an in-process keyspace has no network")

func (hook) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) { return nil, errNoNetwork }
}

func (h hook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := ctx.Err(); err != nil {
			cmd.SetErr(err) // as a client does: nothing sent on a done context
			return err
		}
		return setReply(cmd, h.s.Do(cmd.Args()...))
	}
}

func (h hook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := ctx.Err(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		// A MULTI ... EXEC pipeline runs as one: nothing interleaves here.
		var results []any
		var first error
		for _, cmd := range cmds {
			var r any
			switch strings.ToLower(argString(cmd.Args()[0])) {
			case "multi":
				r = Status("OK")
			case "exec":
				r = results
			default:
				r = h.s.top(cmd.Args())
				results = append(results, r)
			}
			if err := setReply(cmd, r); err != nil && first == nil && !errors.Is(err, redis.Nil) {
				first = err
			}
		}
		return first
	}
}

// setReply puts a reply into a go-redis command and returns its error.
func setReply(cmd redis.Cmder, r any) error {
	if e, ok := r.(errReply); ok {
		cmd.SetErr(e)
		return e
	}
	if r == nil {
		cmd.SetErr(redis.Nil)
		return redis.Nil
	}
	switch c := cmd.(type) {
	case *redis.Cmd:
		c.SetVal(goValue(r))
	case *redis.StatusCmd:
		c.SetVal(fmt.Sprint(goValue(r)))
	case *redis.StringCmd:
		c.SetVal(fmt.Sprint(goValue(r)))
	case *redis.IntCmd:
		n, ok := r.(int64)
		if !ok {
			return typeMismatch(cmd, r)
		}
		c.SetVal(n)
	case *redis.ScanCmd:
		a, ok := r.([]any)
		if !ok || len(a) != 2 {
			return typeMismatch(cmd, r)
		}
		cursor, _ := strconv.ParseUint(fmt.Sprint(a[0]), 10, 64)
		page, _ := a[1].([]any)
		keys := make([]string, len(page))
		for i, k := range page {
			keys[i] = fmt.Sprint(k)
		}
		c.SetVal(keys, cursor)
	case *redis.DurationCmd:
		n, ok := r.(int64)
		if !ok {
			return typeMismatch(cmd, r)
		}
		unit := time.Millisecond // pttl, pexpiretime
		if name := cmd.Name(); name == "ttl" || name == "expiretime" {
			unit = time.Second
		}
		if n < 0 {
			unit = 1 // -1 and -2 stay as they are, as go-redis leaves them
		}
		c.SetVal(time.Duration(n) * unit)
	case *redis.BoolCmd:
		switch v := r.(type) {
		case int64:
			c.SetVal(v == 1)
		case Status:
			c.SetVal(v == "OK")
		default:
			return typeMismatch(cmd, r)
		}
	case *redis.SliceCmd:
		a, ok := goValue(r).([]any)
		if !ok {
			return typeMismatch(cmd, r)
		}
		c.SetVal(a)
	case *redis.StringSliceCmd:
		a, ok := r.([]any)
		if !ok {
			return typeMismatch(cmd, r)
		}
		out := make([]string, len(a))
		for i, x := range a {
			out[i] = fmt.Sprint(goValue(x))
		}
		c.SetVal(out)
	case *redis.BoolSliceCmd:
		a, ok := r.([]any)
		if !ok {
			return typeMismatch(cmd, r)
		}
		out := make([]bool, len(a))
		for i, x := range a {
			out[i] = x == int64(1)
		}
		c.SetVal(out)
	case *redis.MapStringStringCmd:
		a, ok := r.([]any)
		if !ok {
			return typeMismatch(cmd, r)
		}
		m := make(map[string]string, len(a)/2)
		for i := 0; i+1 < len(a); i += 2 {
			m[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
		}
		c.SetVal(m)
	default:
		err := fmt.Errorf("vredis: %s: go-redis reply type %T not supported", cmd.Name(), cmd)
		cmd.SetErr(err)
		return err
	}
	return nil
}

func typeMismatch(cmd redis.Cmder, r any) error {
	err := fmt.Errorf("vredis: %s: reply %T does not fit %T", cmd.Name(), r, cmd)
	cmd.SetErr(err)
	return err
}

// goValue is a reply as go-redis gives it in a *redis.Cmd: statuses as
// strings, nested errors as errors. Arrays are converted in place (a reply
// is the caller's).
func goValue(r any) any {
	switch v := r.(type) {
	case Status:
		return string(v)
	case []any:
		for i, x := range v {
			v[i] = goValue(x)
		}
		return v
	}
	return r
}
