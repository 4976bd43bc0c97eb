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
//	rnd(14 bits) · 2^39 + published(1) · 2^38 + count(22) · 2^16 + seen(16)
//
// rnd is random; the key's expiry (set with PXAT, read with PEXPIRETIME) and
// rnd together are the round's token, so the token costs no bytes of its
// own. seen is the latest event's time after the round's base (its expiry
// minus its lifetime, which the round's jobs carry as their TTL), in ms, as
// a 16-bit float (encodeSeen): exact to the millisecond for 4 s, then within
// 1/2048 of the round's age, for a round of any lifetime (up to 139 years).
//
// The hash layout (extend, payload last or accumulate) keeps the fields
// listed in scripts/open_round.lua and a 62-bit random token.
const (
	packRndShift = 39
	packPub      = 1 << 38
	packCnt      = 1 << 16
	packMaxCount = 1<<22 - 1
	packMaxSeen  = 1<<16 - 1
	packRndBits  = 14

	// seenExact: below it a seen field is the milliseconds themselves.
	seenExact = 2048

	// hashTokenBit marks a hash-layout token; packed tokens stay below 2^56.
	hashTokenBit = 1 << 62
)

type packed uint64

func (v packed) rnd() uint64     { return uint64(v) >> packRndShift }
func (v packed) published() bool { return uint64(v)&packPub != 0 }
func (v packed) count() int      { return int(uint64(v) >> 16 & packMaxCount) }
func (v packed) seen() uint64    { return uint64(v) & packMaxSeen }

// lastSeen is the latest event of a round with this expiry and lifetime.
func (v packed) lastSeen(expiryMs int64, lifetime time.Duration) time.Time {
	return msTime(expiryMs - lifetime.Milliseconds() + decodeSeen(v.seen()))
}

// packOpen is the value a round opens with: one event, not published, seen
// 0 (the script adds the opening event's seen).
func packOpen(rnd uint64) packed {
	return packed(rnd<<packRndShift | packCnt)
}

// encodeSeen writes ms >= 0 in 16 bits: ms itself below 2*seenExact, else a
// float with an 11-bit mantissa (the leading 1 implied) and a 5-bit
// exponent, rounded down, saturating. It is monotonic, so the greatest
// encoding is the latest event's. The scripts have the same function.
func encodeSeen(ms int64) uint64 {
	if ms < 2*seenExact {
		return uint64(max(ms, 0))
	}
	e := uint64(1)
	for ms >= 2*seenExact {
		ms /= 2
		e++
	}
	if e > 31 {
		return packMaxSeen
	}
	return e*seenExact + uint64(ms) - seenExact
}

// decodeSeen is the inverse of encodeSeen (the lower end of the range an
// encoding stands for).
func decodeSeen(v uint64) int64 {
	if v < 2*seenExact {
		return int64(v)
	}
	e, m := v/seenExact, v%seenExact
	return int64(seenExact+m) << (e - 1)
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
