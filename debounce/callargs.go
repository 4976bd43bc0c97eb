package debounce

import (
	"context"
	"strconv"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Script calls without an allocation per argument (issue 25, sixth pass).
//
// go-redis takes a command's arguments as interfaces, and boxing a string,
// a byte slice or a number above 255 into one allocates: a decision's
// script call paid one allocation for each of its keys and arguments, the
// script's hash and the slice that held them (a Redis-bound join of payload
// last: 10 of its 20). Here a call's numbers, byte slices and keys are
// written into one callArgs and sent as pointers into it (a pointer boxes
// without allocating): go-redis's writer sends an encoding.BinaryMarshaler
// as the bytes it returns, without a copy, and fmt.Stringer gives hooks,
// errors and vredis the text.

// bytesRef is a byte slice sent by reference.
type bytesRef []byte

// MarshalBinary returns the bytes themselves: go-redis writes them out and
// keeps nothing.
func (b *bytesRef) MarshalBinary() ([]byte, error) { return *b, nil }

func (b *bytesRef) String() string { return string(*b) }

// strRef is a string sent by reference (a script call's keys).
type strRef string

// MarshalBinary returns the string's own bytes, read only: go-redis writes
// them out and keeps nothing.
func (s *strRef) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(string(*s)), len(*s)), nil
}

func (s *strRef) String() string { return string(*s) }

// callArgs holds one script call's keys and gives its numbers and byte
// slices as arguments from the room of the struct that holds it: a
// packedCall or a roundCall, each sized for its calls; past that room, an
// argument is boxed as go-redis would box it.
type callArgs struct {
	keys [3]string
	argv []any      // the call's arguments: room for them
	refs []bytesRef // references given; cap: the room for them
	text []byte     // the text written; cap: the room for it
}

// packedCall is open_packed.lua's: 3 keys, at most 8 arguments, 5 of them
// numbers and byte slices (about 60 bytes of text).
type packedCall struct {
	callArgs
	argv [8]any
	refs [5]bytesRef
	text [64]byte
}

func newPackedCall() *callArgs {
	c := new(packedCall)
	return c.callArgs.in(c.argv[:], c.refs[:], c.text[:])
}

// joinCall is join_round.lua's: 2 keys, 6 arguments, 2 of them a number
// and a byte slice, and the reply's numbers (scriptInts).
type joinCall struct {
	callArgs
	argv [6]any
	refs [2]bytesRef
	text [24]byte
	ints [8]int64
}

func newJoinCall() *joinCall {
	c := new(joinCall)
	c.callArgs.in(c.argv[:], c.refs[:], c.text[:])
	return c
}

// roundCall is open_round.lua's: 3 keys, at most 15 arguments, 8 of them
// numbers and byte slices (about 130 bytes of text with a job type of 30
// bytes), and the reply's numbers (scriptInts).
type roundCall struct {
	callArgs
	argv [15]any
	refs [8]bytesRef
	text [160]byte
	ints [8]int64
}

func newRoundCall() *roundCall {
	c := new(roundCall)
	c.callArgs.in(c.argv[:], c.refs[:], c.text[:])
	return c
}

// in gives a its room: the arrays of the struct that holds it.
func (a *callArgs) in(argv []any, refs []bytesRef, text []byte) *callArgs {
	a.argv, a.refs, a.text = argv[:0], refs[:0], text[:0]
	return a
}

// ref returns b as an argument: by reference while refs has room.
func (a *callArgs) ref(b []byte) any {
	n := len(a.refs)
	if n == cap(a.refs) {
		return b
	}
	a.refs = a.refs[:n+1]
	a.refs[n] = b
	return &a.refs[n]
}

// room is what is left of text, for an append.
func (a *callArgs) room() []byte { return a.text[len(a.text):len(a.text)] }

// took records that t was appended to room(): what fitted stays taken.
func (a *callArgs) took(t []byte) []byte {
	n := len(a.text)
	if len(t) <= cap(a.text)-n && unsafe.SliceData(t) == unsafe.SliceData(a.text[n:cap(a.text)]) {
		a.text = a.text[:n+len(t)]
	}
	return t
}

// int returns v as an argument, its decimal text in a.
func (a *callArgs) int(v int64) any {
	if v >= 0 && v < 256 {
		return v // boxed without an allocation
	}
	return a.ref(a.took(strconv.AppendInt(a.room(), v, 10)))
}

// uint returns v as an argument, its decimal text in a.
func (a *callArgs) uint(v uint64) any {
	if v < 256 {
		return v
	}
	return a.ref(a.took(strconv.AppendUint(a.room(), v, 10)))
}

// bytes returns b as an argument (by reference: b must not change until
// the call is answered).
func (a *callArgs) bytes(b []byte) any {
	if b == nil {
		return nil // go-redis and vredis send nil as ""
	}
	return a.ref(b)
}

// scriptHashes holds each script's hash boxed once.
var scriptHashes = map[*redis.Script]any{}

// hashArg returns s's hash as an argument, boxed at most once per script
// registered in scriptHashes (registerHashes, at init).
func hashArg(s *redis.Script) any {
	if h, ok := scriptHashes[s]; ok {
		return h
	}
	return s.Hash()
}

// registerHashes boxes the hashes of the scripts decisions run, once.
func registerHashes(scripts ...*redis.Script) {
	for _, s := range scripts {
		scriptHashes[s] = s.Hash()
	}
}

// scriptCmd is s's EVALSHA with keys and args, as go-redis's
// Script.EvalSha builds it but with the hash boxed once and, when byRef,
// the keys by reference: only for a client that sends every command to one
// server (*redis.Client); a Cluster or Ring client reads the first key's
// text to route the command.
func scriptCmd(ctx context.Context, s *redis.Script, byRef bool, keys []string, args []any) *redis.Cmd {
	a := make([]any, 3+len(keys), 3+len(keys)+len(args))
	a[0], a[1], a[2] = "evalsha", hashArg(s), len(keys)
	for i := range keys {
		if byRef {
			a[3+i] = (*strRef)(&keys[i])
		} else {
			a[3+i] = keys[i]
		}
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// processor is what runs a command: a client or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// evalSha queues or runs s's EVALSHA on c (scriptCmd); other evalers
// (setXX) their own.
func evalSha(ctx context.Context, c redis.Scripter, s evaler, byRef bool, keys []string, args []any) *redis.Cmd {
	rs, ok := s.(*redis.Script)
	p, pok := c.(processor)
	if !ok || !pok {
		return s.EvalSha(ctx, c, keys, args...)
	}
	cmd := scriptCmd(ctx, rs, byRef, keys, args)
	_ = p.Process(ctx, cmd)
	return cmd
}

// evalSource is s's EVAL (with its source: rare, after a NOSCRIPT), as
// go-redis builds it.
func evalSource(ctx context.Context, c redis.Scripter, s evaler, keys []string, args []any) *redis.Cmd {
	return s.Eval(ctx, c, keys, args...)
}

// runScript is Script.Run through evalSha: EVALSHA, then EVAL when the
// server does not have the script (NOSCRIPT).
func runScript(ctx context.Context, c redis.UniversalClient, s evaler, keys []string, args []any) *redis.Cmd {
	_, plain := c.(*redis.Client)
	cmd := evalSha(ctx, c, s, plain, keys, args)
	if isNoScript(cmd.Err()) {
		return evalSource(ctx, c, s, keys, args)
	}
	return cmd
}

func init() {
	registerHashes(openPackedScript, openRoundScript, joinRoundScript, openHeldManyScript, joinManyScript,
		openPackedIdemScript, openRoundIdemScript, flushPackedScript, flushRoundScript, takeRoundScript,
		releasePackedScript, markPackedScript, markRoundScript, countStartScript, uncountStartScript,
		reapScript, noteOverdueScript, repairPackedScript, repairRoundScript, leaseTakeScript,
		storeIdentityScript, forwardClaimScript, forwardTakeScript, forwardDoneScript)
}
