// Package effect records, in Postgres, that an effect which must never
// repeat has happened, in the same transaction as the effect itself.
//
// The worker's run-once guard (worker.GuardConfig) keeps its claim and its
// "done" in Redis, with TTLs: a redelivery after the done key expired, after
// Redis lost its data, or a replay of the job from the dead letters days
// later, runs the handler again. For payments, invoices and the like, the
// handler also records the effect in its own database transaction with a
// unique key (Claim, or Once around the effect's writes): the second run
// finds the record and does nothing. The Redis guard stays the fast
// pre-check for hot duplicates.
//
// The table is coalesce_effects, created by the outbox migration
// (outbox.Migrate, coalesce outbox migrate, or outbox/schema.sql). The
// contract, for workers in any language (coalesce work --exec/--post, or the
// worker protocol):
//
//	BEGIN;
//	INSERT INTO coalesce_effects (effect_key, job_type, round) VALUES ($1, $2, $3)
//	  ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key;
//	-- no row returned: the effect was done before; ROLLBACK and acknowledge the job.
//	-- a row returned: make the effect's writes here, then
//	COMMIT;
//
// A second transaction inserting the same key waits for the first: it finds
// the record if the first committed, and takes over if it rolled back. The
// key of a job is "<type>:<job id>" (KeyOf; the job's id is
// "<round key>.<round token>", or "<round key>.<bypass>" for a job bypassed
// while Redis was down; from the job document --exec and --post workers
// get: type ":" id; the Idempotency-Key header of work --post is the id),
// the same for every delivery and for a replay from the dead letters, and
// another for every other job; an effect of its own identity (say
// "charge:invoice-42") is a better key still.
//
// What the record cannot cover: an effect outside the database (a call to a
// payment provider) made inside the transaction, whose commit then fails or
// never comes (the worker dies), is not recorded and runs again on the next
// delivery. Pass the provider the same key as an idempotency key.
package effect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/worker"
)

// MaxKeyLen bounds an effect key, in bytes.
const MaxKeyLen = 1024

// ErrInvalidKey: an effect key that cannot be recorded.
var ErrInvalidKey = errors.New("effect: invalid effect key")

// Record is one effect.
type Record struct {
	// Key identifies the effect (required, 1-MaxKeyLen bytes of UTF-8, no
	// NUL): KeyOf(job), or the effect's own identity.
	Key     string
	JobType string // for people reading the table
	Round   string // the round token, for people reading the table
	// Result is optional text kept with the record (say the provider's
	// receipt), set at Claim or later with SetResult.
	Result string
	// CreatedAt is when the record was made (read back by Lookup).
	CreatedAt time.Time
}

// KeyOf is the effect key of a job: "<type>:<job id>" (debounce.Job.ID:
// "<round key>.<token>", or "<round key>.<bypass>" for a bypassed job), the
// same for every delivery of the job and for a replay of it from the dead
// letters, and another for every other job, bypassed ones included. ""
// only for a job without an identity (a bypassed job built by hand without
// its Bypass), which Claim refuses.
func KeyOf(job *worker.Job) string {
	id := job.ID()
	if id == "" {
		return ""
	}
	return job.Type + ":" + id
}

// RecordOf is the Record of a job (KeyOf, its type, and its round token or,
// bypassed, its Bypass).
func RecordOf(job *worker.Job) Record {
	round := job.Token.String()
	if job.Token == 0 {
		round = job.Bypass
	}
	return Record{Key: KeyOf(job), JobType: job.Type, Round: round}
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key: required (effect.KeyOf(job), or the effect's own identity such as \"charge:invoice-42\")", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: key: must be UTF-8 without NUL bytes", ErrInvalidKey)
	}
	return nil
}

const claimSQL = `INSERT INTO coalesce_effects (effect_key, job_type, round, result) VALUES ($1, $2, $3, NULLIF($4, ''))
ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key`

// Claim records r in tx. first reports that this transaction made the
// record: make the effect in tx, then commit. false: the effect was recorded
// before (by a committed transaction); skip it. A concurrent transaction
// holding the same key makes Claim wait for its end.
func Claim(ctx context.Context, tx pgx.Tx, r Record) (first bool, err error) {
	if err := checkKey(r.Key); err != nil {
		return false, err
	}
	var k string
	err = tx.QueryRow(ctx, claimSQL, r.Key, r.JobType, r.Round, r.Result).Scan(&k)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("effect: claim %s: %w", r.Key, err)
	}
	return true, nil
}

// SetResult stores result with the record of key, in tx.
func SetResult(ctx context.Context, tx pgx.Tx, key, result string) error {
	if _, err := tx.Exec(ctx, `UPDATE coalesce_effects SET result = $2 WHERE effect_key = $1`, key, result); err != nil {
		return fmt.Errorf("effect: set result %s: %w", key, err)
	}
	return nil
}

// Beginner starts a transaction: a *pgxpool.Pool or *pgx.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Once runs fn inside a new transaction that records r, and commits both;
// when r was recorded before, fn does not run and ran is false. An error of
// fn rolls everything back (nothing recorded), and is returned.
func Once(ctx context.Context, db Beginner, r Record, fn func(ctx context.Context, tx pgx.Tx) error) (ran bool, err error) {
	if err := checkKey(r.Key); err != nil {
		return false, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("effect: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	first, err := Claim(ctx, tx, r)
	if err != nil || !first {
		return false, err
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("effect: commit %s: %w", r.Key, err)
	}
	return true, nil
}

// Querier runs a query returning one row: a pool, a connection or a tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Lookup reads the record of key; found is false when there is none.
func Lookup(ctx context.Context, q Querier, key string) (r Record, found bool, err error) {
	var result *string
	err = q.QueryRow(ctx, `SELECT effect_key, job_type, round, result, created_at FROM coalesce_effects WHERE effect_key = $1`, key).
		Scan(&r.Key, &r.JobType, &r.Round, &result, &r.CreatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, fmt.Errorf("effect: lookup %s: %w", key, err)
	}
	if result != nil {
		r.Result = *result
	}
	return r, true, nil
}
