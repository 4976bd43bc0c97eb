package debounce

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each under scripts/, each opening with its
// KEYS/ARGV/returns contract. Every key a script touches is passed in KEYS and
// shares the round's hash tag, except where a script serves many rounds at
// once, which happens only on a single node (the flush groups its calls by
// slot; due lists, deferred.go, exist only on a single-node or Sentinel
// Redis), and a hash round's payload key (lastkey.go): open_round.lua,
// join_tail.lua, take_round.lua and reap.lua reach it by its name (the
// round's key, "a" and the token read from the round), on the round's slot;
// it exists only where a policy has local_joins on, which is refused on a
// Cluster, and elsewhere those touches find no key.
var (
	//go:embed scripts/open_packed.lua
	openPackedLuaFile string
	openPackedLua     = withSeen(openPackedLuaFile)
	//go:embed scripts/seen.lua
	seenLua string
	//go:embed scripts/release_packed.lua
	releasePackedLua string
	//go:embed scripts/mark_packed.lua
	markPackedLua string
	//go:embed scripts/open_round.lua
	openRoundLuaFile string
	openRoundLua     = withFields(openRoundLuaFile)
	//go:embed scripts/take_round.lua
	takeRoundLua string
	//go:embed scripts/mark_round.lua
	markRoundLua string
	//go:embed scripts/count_start.lua
	countStartLua string
	//go:embed scripts/reap.lua
	reapLua string
	//go:embed scripts/note_overdue.lua
	noteOverdueLua string
	//go:embed scripts/repair_packed.lua
	repairPackedLua string
	//go:embed scripts/repair_round.lua
	repairRoundLua string
	//go:embed scripts/lease_take.lua
	leaseTakeLua string
	//go:embed scripts/store_identity.lua
	storeIdentityLua string
	//go:embed scripts/flush_packed.lua
	flushPackedLua string
	//go:embed scripts/flush_round.lua
	flushRoundLua string
	//go:embed scripts/uncount_start.lua
	uncountStartLua string
	//go:embed scripts/forward_claim.lua
	forwardClaimLua string
	//go:embed scripts/forward_take.lua
	forwardTakeLua string
	//go:embed scripts/forward_done.lua
	forwardDoneLua string
	//go:embed scripts/join_round.lua
	joinRoundLuaFile string
	joinRoundLua     = withFields(joinRoundLuaFile)
	//go:embed scripts/join_tail.lua
	joinTailLua string
	//go:embed scripts/join_fields.lua
	joinFieldsLua string

	openPackedScript    = redis.NewScript(openPackedLua)
	releasePackedScript = redis.NewScript(releasePackedLua)
	markPackedScript    = redis.NewScript(markPackedLua)
	openRoundScript     = redis.NewScript(withSeen(openRoundLua) + joinTailLua)
	joinRoundScript     = redis.NewScript(joinRoundLua + joinTailLua)
	takeRoundScript     = redis.NewScript(takeRoundLua)
	markRoundScript     = redis.NewScript(markRoundLua)
	countStartScript    = redis.NewScript(countStartLua)
	reapScript          = redis.NewScript(reapLua)
	noteOverdueScript   = redis.NewScript(noteOverdueLua)
	repairPackedScript  = redis.NewScript(repairPackedLua)
	repairRoundScript   = redis.NewScript(repairRoundLua)
	leaseTakeScript     = redis.NewScript(leaseTakeLua)
	storeIdentityScript = redis.NewScript(storeIdentityLua)
	flushPackedScript   = redis.NewScript(withSeen(flushPackedLua))
	flushRoundScript    = redis.NewScript(flushRoundLua)
	uncountStartScript  = redis.NewScript(uncountStartLua)
	forwardClaimScript  = redis.NewScript(forwardClaimLua)
	forwardTakeScript   = redis.NewScript(forwardTakeLua)
	forwardDoneScript   = redis.NewScript(forwardDoneLua)
)

// The statuses of the scripts that close a round (release_packed.lua and
// take_round.lua): one code per meaning in both. Each script declares them
// as locals of the upper-case names (STALE, MISSING, …), and
// TestScriptStatuses checks the values against these.
const (
	closeStale      = -1 // another round holds the key
	closeMissing    = 0  // no round: expired, or closed already
	closeClosed     = 1  // closed: taken at job start, or released
	closeNotDue     = 2  // take: an extended round not due yet (hash layout)
	closeKept       = 3  // backout: a joiner published it meanwhile
	closeShared     = 4  // backout: a joiner joined it, not yet published
	closeRetry      = 5  // take: taken already by an earlier delivery of this message
	closeSuperseded = 6  // take: taken by another version's message
	closeDone       = 7  // take: its job finished a moment ago
)

// withFields puts scripts/join_fields.lua (the HMGET of the round's fields
// a join reads) in place of a script's FIELDS marker.
func withFields(lua string) string {
	return strings.Replace(lua, "--FIELDS--", joinFieldsLua, 1)
}

// withSeen puts scripts/seen.lua (the packed layout's encoding of the
// latest event's time, and its join of one event) in place of a script's
// SEEN marker.
func withSeen(lua string) string {
	return strings.Replace(lua, "--SEEN--", seenLua, 1)
}
