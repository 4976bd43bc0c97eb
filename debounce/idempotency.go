package debounce

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// Idempotency keys (Event.IdempotencyKey) make a retried Submit safe: a
// client whose request timed out after the decision sends the event again
// with the same key, and gets the first decision back, marked Replayed,
// instead of being counted twice (or, for accumulate without item_field,
// kept twice).
//
// The record of a key is written by the decision's own script call
// (scripts/idempotent.lua wraps open_packed.lua or open_round.lua,
// unchanged), so nothing can separate the decision from its record: a
// retry arriving while the first request is still being answered replays
// it too. It lives beside the round (same Cluster hash tag, key
// <prefix>i{<round digest>}<16 bytes of the key's SHA-256>), for
// IdempotencyWindow, and holds a digest of the event (type, key and
// canonical args: the same event written with other spacing, member order
// or number spelling is the same) and the script's reply. The same key
// with another event is refused (ErrIdempotencyKeyReused); with an event
// of another round key it names another record (one script can only touch
// one hash tag), so it is decided as a new event: use a fresh key per event.
//
// A replay publishes nothing again, with one exception: if the round it
// names is still pending and unpublished (the first request failed to
// publish it after deciding, or is still publishing), it publishes it as
// any joiner would (idempotently: the same token and version). A round
// whose publish failed and was backed out has its record deleted first, so
// its retry is decided anew.
//
// Events with a key always go to Redis: a local join (local.go) records
// nothing there, so its retry could not be recognised.

// DefaultIdempotencyWindow is how long an idempotency key's decision is
// kept (Config.IdempotencyWindow).
const DefaultIdempotencyWindow = 10 * time.Minute

// MaxIdempotencyKeyLen bounds an idempotency key, in bytes.
const MaxIdempotencyKeyLen = 255

// The statuses idempotent.lua adds to (or returns instead of) the decision
// script's reply (TestScriptStatuses checks them).
const (
	idemReused   = -1
	idemFresh    = 0
	idemReplayed = 1
)

//go:embed scripts/idempotent.lua
var idempotentLua string

// The decision scripts, each wrapped by idempotent.lua.
var (
	openPackedIdemScript = redis.NewScript(wrapIdempotent(openPackedLua))
	openRoundIdemScript  = redis.NewScript(wrapIdempotent(withSeen(openRoundLua) + joinTailLua))
)

func wrapIdempotent(decide string) string {
	return strings.Replace(idempotentLua, "--DECIDE--", decide, 1)
}

// idempotency is an event's record: its Redis key and the event's digest.
type idempotency struct {
	key    string
	digest string
}

// ValidIdempotencyKey reports whether k is an acceptable idempotency key:
// 1-255 bytes of visible ASCII.
func ValidIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// idempotencyOf checks ev's idempotency key and works out its record; nil
// when the event has none.
func (c *Coalescer) idempotencyOf(p *compiled, ev Event, key RoundKey) (*idempotency, error) {
	if ev.IdempotencyKey == "" {
		return nil, nil
	}
	if !ValidIdempotencyKey(ev.IdempotencyKey) {
		return nil, eventError("idempotency_key", "invalid_idempotency_key", "idempotency_key: must be 1-%d bytes of visible ASCII (a UUID, say)", MaxIdempotencyKeyLen)
	}
	canon, err := fingerprint.Canonicalize(ev.Args)
	if err != nil {
		return nil, fingerprintError(err, "")
	}
	h := sha256.New()
	h.Write([]byte("coalesce idempotency 1\n" + ev.Type + "\n"))
	h.Write([]byte(ev.Key))
	h.Write([]byte{'\n'})
	h.Write(canon)
	var sum [sha256.Size]byte
	digest := hex.EncodeToString(h.Sum(sum[:0])[:16])
	kh := sha256.Sum256([]byte(ev.IdempotencyKey))
	round := redisKey(c.prefix, p.mix, key, "")
	// prefix "i" {tag} key-hash: outside the prefix{* the reaper scans.
	return &idempotency{key: c.prefix + "i" + round[len(c.prefix):] + string(kh[:16]), digest: digest}, nil
}

// evalIdempotent runs a decision script wrapped by idempotent.lua and
// returns its reply as integers, whether it was replayed, and the
// replication doubt of its write (replication.go), as the plain scripts'.
func (c *Coalescer) evalIdempotent(ctx context.Context, wrapped *redis.Script, id *idempotency, keys []string, args ...any) (ints []int64, replayed bool, doubt, err error) {
	keys = append(keys[:len(keys):len(keys)], id.key)
	args = append(args[:len(args):len(args)], id.digest, c.idemWindow.Milliseconds())
	cmd, doubt := c.evalDoubt(ctx, wrapped, keys, args...)
	res, err := cmd.Slice()
	if err != nil {
		return nil, false, doubt, err
	}
	if ints, err = int64s(res); err != nil {
		return nil, false, doubt, err
	}
	switch last := ints[len(ints)-1]; {
	case len(ints) == 1 && last == idemReused:
		return nil, false, nil, ErrIdempotencyKeyReused
	case last == idemReplayed:
		return ints[:len(ints)-1], true, doubt, nil
	case last == idemFresh:
		return ints[:len(ints)-1], false, doubt, nil
	default:
		return nil, false, doubt, fmt.Errorf("idempotent: unexpected reply %v", res)
	}
}

// ErrIdempotencyKeyReused: the event's idempotency key was used with
// another event within the window; nothing was decided. It is an
// *EventError (field idempotency_key, code idempotency_key_reused).
var ErrIdempotencyKeyReused error = &EventError{Field: "idempotency_key", Code: "idempotency_key_reused",
	Msg: "idempotency_key: this key was sent earlier with another event (another type, key or args); nothing was decided: use a fresh key for each event"}

// replay finishes a replayed decision: it publishes the round it names
// only if that round is still pending and unpublished (the first request
// did not, or not yet, publish it), as a joiner would.
func (c *Coalescer) replay(ctx context.Context, p *compiled, d Decision, job Job, r reply) (Decision, error) {
	d.Replayed = true
	if r.published && r.status != statusOpened && r.status != statusLeading {
		return d, nil
	}
	cur, found, err := c.inspectKey(ctx, p, job.Key, r.rkey, false)
	if err != nil {
		return d, err
	}
	if !found || cur.Token != r.token || cur.Published {
		return d, nil // published, taken, or gone: nothing to do
	}
	if r.fire {
		job.Version, job.DueAt = r.version, c.now()
	}
	if err := c.publish(ctx, job); err != nil {
		return d, err
	}
	c.markPublished(ctx, p, job.Key, r)
	return d, nil
}

// forgetIdempotency deletes the record of a decision that is being undone
// (its publish failed): its retry must be decided anew. false when it
// could not be deleted: the round must then stay, unpublished, for that
// retry's replay (or the reaper) to publish.
func (c *Coalescer) forgetIdempotency(ctx context.Context, r reply) bool {
	if r.idem == "" {
		return true
	}
	return c.rdb.Del(ctx, r.idem).Err() == nil
}

func (c *Coalescer) setIdempotency(cfg Config) error {
	c.idemWindow = cfg.IdempotencyWindow
	if c.idemWindow == 0 {
		c.idemWindow = DefaultIdempotencyWindow
	}
	if c.idemWindow < time.Second || c.idemWindow > 7*24*time.Hour {
		return fmt.Errorf("%w: Config.IdempotencyWindow %v: must be 1s to 7 days (default %v)", ErrInvalidConfig, cfg.IdempotencyWindow, DefaultIdempotencyWindow)
	}
	return nil
}
