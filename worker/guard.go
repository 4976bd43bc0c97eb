package worker

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/fence"
)

var (
	//go:embed scripts/guard_complete.lua
	guardCompleteLua string

	guardCompleteScript = redis.NewScript(guardCompleteLua)
)

// Guard defaults.
const (
	DefaultClaimTTL    = 5 * time.Minute
	DefaultDoneTTL     = 24 * time.Hour
	DefaultGuardPrefix = "g"
)

// GuardConfig turns on the run-once guard for a job type: a claim in Redis
// taken with SET NX before the handler runs, marked done after it succeeds
// (compare-and-set), released when it fails (compare-and-delete) and
// refreshed while it runs. A redelivery that finds the job done is
// acknowledged without running; one that finds it running is retried later,
// never acknowledged, because the first run may still fail.
//
// The guard keeps a side effect to one when a worker dies after the handler
// but before the acknowledgement. A worker that dies during the handler
// leaves a claim that expires after ClaimTTL, and the retry runs again: make
// the handler itself idempotent where twice is unacceptable.
type GuardConfig struct {
	Redis    redis.UniversalClient // required
	Prefix   string                // claim key prefix; DefaultGuardPrefix
	ClaimTTL time.Duration         // claim lifetime, refreshed every third of it; DefaultClaimTTL
	DoneTTL  time.Duration         // how long "done" is remembered; DefaultDoneTTL
}

// GuardResult is what the guard decided for one delivery.
type GuardResult string

// Guard results.
const (
	GuardRan           GuardResult = "ran"               // claimed, ran, marked done
	GuardFailed        GuardResult = "failed"            // claimed, the handler failed, claim released
	GuardDuplicateDone GuardResult = "duplicate_done"    // already done: acknowledged without running
	GuardDuplicateBusy GuardResult = "duplicate_running" // running elsewhere: retried later
	GuardClaimLost     GuardResult = "claim_lost"        // ran, but the claim had expired: may have run twice
)

type guard struct {
	cfg GuardConfig
}

func newGuard(cfg GuardConfig) (*guard, error) {
	if cfg.Redis == nil {
		return nil, fmt.Errorf("%w: GuardConfig.Redis is required", ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultGuardPrefix
	}
	if cfg.ClaimTTL == 0 {
		cfg.ClaimTTL = DefaultClaimTTL
	}
	if cfg.DoneTTL == 0 {
		cfg.DoneTTL = DefaultDoneTTL
	}
	if cfg.ClaimTTL < 30*time.Millisecond || cfg.DoneTTL < cfg.ClaimTTL {
		return nil, fmt.Errorf("%w: guard claim_ttl %v must be at least 30ms and done_ttl %v at least the claim", ErrInvalidConfig, cfg.ClaimTTL, cfg.DoneTTL)
	}
	return &guard{cfg: cfg}, nil
}

// claim is one held claim.
type claim struct {
	key, value string
}

// key names the claim of one job execution: the round (type, key, token),
// or the message id for a job published without a round.
func (g *guard) key(jobType, id string) string {
	return g.cfg.Prefix + "{" + jobType + ":" + id + "}"
}

// acquire claims the job; when another holds it, it says whether that one
// is done or still running.
func (g *guard) acquire(ctx context.Context, jobType, id string) (*claim, GuardResult, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	c := &claim{key: g.key(jobType, id), value: "running:" + hex.EncodeToString(b[:])}
	ok, err := g.cfg.Redis.SetNX(ctx, c.key, c.value, g.cfg.ClaimTTL).Result()
	if err != nil {
		return nil, "", err
	}
	if ok {
		return c, "", nil
	}
	state, err := g.cfg.Redis.Get(ctx, c.key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return g.acquire(ctx, jobType, id) // released between our two calls: try once more
	case err != nil:
		return nil, "", err
	case state == "done":
		return nil, GuardDuplicateDone, nil
	default:
		return nil, GuardDuplicateBusy, nil
	}
}

// keepAlive refreshes the claim every third of its TTL until stop is closed.
func (g *guard) keepAlive(c *claim, stop <-chan struct{}) {
	every(g.cfg.ClaimTTL/3, stop, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ClaimTTL/3)
		defer cancel()
		_, _ = fence.Refresh(ctx, g.cfg.Redis, c.key, c.value, g.cfg.ClaimTTL)
		return true
	})
}

// complete marks the claim done; false when it was no longer ours.
func (g *guard) complete(ctx context.Context, c *claim) (bool, error) {
	n, err := guardCompleteScript.Run(ctx, g.cfg.Redis, []string{c.key}, c.value, g.cfg.DoneTTL.Milliseconds()).Int()
	return n == 1, err
}

// release gives the claim up after a failed run.
func (g *guard) release(ctx context.Context, c *claim) error {
	_, err := fence.Release(ctx, g.cfg.Redis, c.key, c.value)
	return err
}
