package debounce

import (
	"time"
)

// A round lives in Redis in one of two layouts, both a single key.
//
// The packed layout (dedup, throttle windows, debounce with a fixed window
// and payload first) is one integer below 2^53, so that Lua numbers hold it
// exactly and Redis stores it as an integer object (117 bytes per pending
// round with the default 14-byte key):
//
//	rnd(14 bits) · 2^39 + published(1) · 2^38 + count(22) · 2^16 + remaining(16)
//
// rnd is random; the key's expiry (set with PXAT, read with PEXPIRETIME) and
// rnd together are the round's token, so the token costs no bytes of its
// own. remaining is the time from the latest event to the expiry in units of
// unitFor(lifetime), which gives the last-seen time back.
//
// The hash layout (extend, payload last or accumulate) keeps the fields
// listed in scripts/open_round.lua and a 62-bit random token.
const (
	packRndShift = 39
	packPub      = 1 << 38
	packCnt      = 1 << 16
	packMaxCount = 1<<22 - 1
	packMaxRem   = 1<<16 - 1
	packRndBits  = 14

	// hashTokenBit marks a hash-layout token; packed tokens stay below 2^56.
	hashTokenBit = 1 << 62
)

type packed uint64

func (v packed) rnd() uint64      { return uint64(v) >> packRndShift }
func (v packed) published() bool  { return uint64(v)&packPub != 0 }
func (v packed) count() int       { return int(uint64(v) >> 16 & packMaxCount) }
func (v packed) remaining() int64 { return int64(uint64(v) & packMaxRem) }

// packOpen is the value a round opens with: one event, not published, the
// whole lifetime remaining.
func packOpen(rnd uint64, lifetime time.Duration) packed {
	rem := lifetime.Milliseconds() / unitFor(lifetime)
	return packed(rnd<<packRndShift | packCnt | uint64(min(rem, packMaxRem)))
}

// unitFor is the unit of the remaining field for a round that lives at most
// lifetime: the whole lifetime must fit 16 bits.
func unitFor(lifetime time.Duration) int64 {
	ms := lifetime.Milliseconds()
	return max(1, (ms+packMaxRem-1)/packMaxRem)
}

// packedToken joins the two halves of a packed round's token.
func packedToken(expiryMs int64, rnd uint64) Token {
	return Token(uint64(expiryMs)<<packRndBits | rnd&(1<<packRndBits-1))
}

// isHashToken tells which layout a token belongs to.
func (t Token) isHashToken() bool { return uint64(t)&hashTokenBit != 0 }

// packedParts splits a packed token into expiry (unix ms) and random bits.
func (t Token) packedParts() (expiryMs int64, rnd uint64) {
	return int64(uint64(t) >> packRndBits), uint64(t) & (1<<packRndBits - 1)
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }
