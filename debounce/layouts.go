package debounce

import (
	"context"
	"strconv"
	"time"
)

// A layout is one way of keeping a round in Redis (layout.go describes
// both bit by bit): each operation that differs between them goes through
// it. A policy's layout is chosen once, at New (compiled.layout); a job's
// or reply's follows from its token (layoutOfToken), since a round keeps
// the layout it was opened with after the policy changes.
type layout interface {
	// open opens the key's round or joins it (open_packed.lua,
	// open_round.lua); hold: a round it opens waits in Redis (deferred.go).
	// With an idempotency record, it is written by the same script call.
	open(ctx context.Context, c *Coalescer, p *compiled, job Job, now time.Time, item []byte, id *idempotency, hold bool) (reply, error)
	// mark marks an opened round published.
	mark(ctx context.Context, c *Coalescer, r reply) error
	// backout undoes a round whose publish failed (backoutRemoved, …).
	backout(ctx context.Context, c *Coalescer, r reply) (int, error)
	// release closes a job's round: "take" at its start, "release" or
	// "cancel".
	// Its doubt: with replication acks, the replicas did not confirm the
	// write in time (replication.go).
	release(ctx context.Context, c *Coalescer, job Job, op string) (rel Release, doubt error, err error)
	// other is the other layout: a key holding a round of it is joined in it.
	other() layout
}

// packedLayout keeps a round as one integer (dedup, throttle, fixed
// debounce with payload first).
type packedLayout struct{}

// hashLayout keeps a round as a hash (extend, payload last or accumulate).
type hashLayout struct{}

func layoutOf(hash bool) layout {
	if hash {
		return hashLayout{}
	}
	return packedLayout{}
}

func layoutOfToken(t Token) layout { return layoutOf(t.isHashToken()) }

func (packedLayout) other() layout { return hashLayout{} }
func (hashLayout) other() layout   { return packedLayout{} }

func (packedLayout) open(ctx context.Context, c *Coalescer, p *compiled, job Job, now time.Time, _ []byte, id *idempotency, hold bool) (reply, error) {
	return c.openPacked(ctx, p, job, now, id, hold)
}

func (hashLayout) open(ctx context.Context, c *Coalescer, p *compiled, job Job, now time.Time, item []byte, id *idempotency, hold bool) (reply, error) {
	return c.openRound(ctx, p, job, now, item, id, hold)
}

func (packedLayout) mark(ctx context.Context, c *Coalescer, r reply) error {
	exp, rnd := r.token.packedParts()
	return c.eval(ctx, markPackedScript, []string{r.rkey}, exp, rnd).Err()
}

func (hashLayout) mark(ctx context.Context, c *Coalescer, r reply) error {
	return c.eval(ctx, markRoundScript, []string{r.rkey}, strconv.FormatUint(uint64(r.token), 10)).Err()
}
