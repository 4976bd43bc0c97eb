// Package outbox carries events from a producer's own Postgres transaction to
// Submit, at least once: a transactional outbox for coalesce.
//
// A producer inserts its event into the table coalesce_outbox in the
// transaction that makes the change the event is about (Insert, or the same
// INSERT from any language), so the event exists exactly when the change
// does: a producer that dies after its commit loses nothing, and one whose
// transaction rolls back sends nothing. A Relay (embedded, or inside
// coalesce serve with an outbox section) claims committed rows in id order,
// submits each to a debounce.Coalescer, and deletes a row only once Submit
// decided it and the decision is in Redis (a local join flushed), in the
// same transaction that claimed it (READ COMMITTED, whatever the
// database's default).
//
// # What a relay guarantees
//
//   - At least once: a row is deleted only after its decision; a relay that
//     dies between Submit and its commit leaves the row, which is submitted
//     again and joins the round it already joined (the round's count may
//     then include it twice; an accumulated item is the same one), or the
//     next round if that one's job started meanwhile. Rows are submitted
//     again in their order: with payload last, a round taken between the
//     two submissions may carry an older row's args, the next one the latest.
//   - Order per round key: the rows of one round key are submitted in id
//     order, across any number of relays (a relay holds back a row while a
//     row of the same key with a smaller id is held by another relay). For
//     rows whose transactions committed one after the other that is their
//     commit order; rows of concurrent transactions have no order to keep.
//   - Outages stall, they never drop: a row whose Submit meets Redis or NATS
//     down stays, with the rows of its key behind it, and the relay retries
//     with backoff. A relay needs a Coalescer whose policies fail closed
//     (FailClosed): under fail open, Submit would publish without a
//     reservation and the row would be gone.
//   - Poison rows are moved aside: a row that can never be decided (not
//     JSON, an integer beyond 2^53, no policy for its type, a job too large)
//     goes to coalesce_outbox_dead with its error, and the rows behind it
//     flow. Dead rows have an id of their own (dead_id), so one is never
//     dropped when the outbox's identity starts over.
//
// LISTEN/NOTIFY (a trigger on the table) wakes the relays at each commit;
// they also poll, so a lost notification only delays.
//
// The same migration creates coalesce_effects, the durable effect record of
// package effect.
package outbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
)

// Schema is the SQL of the migration (schema.sql in this folder): the
// outbox, its dead rows, the effect record and the notify trigger. It is
// idempotent; users who run their own migrations ship it as it is.
//
//go:embed schema.sql
var Schema string

// SchemaVersion is the version of Schema, recorded as the comment of the
// coalesce_outbox table.
const SchemaVersion = 2

// Channel is the LISTEN/NOTIFY channel the insert trigger notifies.
const Channel = "coalesce_outbox"

// Sentinel errors; match with errors.Is.
var (
	// ErrInvalidEvent: Insert refused the event (see *FieldError).
	ErrInvalidEvent = errors.New("outbox: invalid event")
	// ErrInvalidConfig: New refused the relay's Config.
	ErrInvalidConfig = errors.New("outbox: invalid config")
)

// FieldError is why Insert refused an event: the field it concerns ("type",
// "args" or a path into them such as "args.tenant_id", "key",
// "traceparent") and a stable code.
type FieldError struct {
	Field string
	Code  string
	Msg   string
	Err   error
}

func (e *FieldError) Error() string { return ErrInvalidEvent.Error() + ": " + e.Msg }

// Is makes a FieldError match ErrInvalidEvent.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidEvent }

func (e *FieldError) Unwrap() error { return e.Err }

// Execer runs SQL: a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// migrateLock is the advisory lock that serialises concurrent migrations
// (two daemons starting at once would race on CREATE TABLE IF NOT EXISTS).
const migrateLock = 0x636f616c65736365 // "coalesce"

// Beginner starts a transaction: a *pgx.Conn or *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate creates or upgrades the tables (Schema) in one transaction,
// serialised with any other Migrate running at the same time. Running it at
// every start is safe.
func Migrate(ctx context.Context, db Beginner) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}

// Insert writes ev into the outbox inside tx, the producer's own
// transaction: the relay sees it once tx commits, never if it rolls back.
// It returns the row's id. The event is checked first, so a mistake shows
// here, naming the field, rather than as a dead row later: the type's form,
// args as I-JSON (an integer beyond 2^53 is refused), the key's length, the
// traceparent's form. Whether the type has a policy is the relay's to say.
func Insert(ctx context.Context, tx pgx.Tx, ev debounce.Event) (int64, error) {
	if err := Check(ev); err != nil {
		return 0, err
	}
	var id int64
	err := tx.QueryRow(ctx, insertSQL, ev.Type, string(ev.Args), nullable(ev.Key), nullable(ev.TraceParent)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("outbox: insert %s: %w", ev.Type, err)
	}
	return id, nil
}

const insertSQL = `INSERT INTO coalesce_outbox (type, args, key, traceparent) VALUES ($1, $2, $3, $4) RETURNING id`

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Check reports what Insert would refuse in ev, as a *FieldError.
func Check(ev debounce.Event) error {
	if err := fingerprint.ValidateType(ev.Type); err != nil {
		return &FieldError{Field: "type", Code: "invalid_type", Msg: err.Error(), Err: err}
	}
	if len(ev.Args) == 0 {
		return &FieldError{Field: "args", Code: "invalid_event", Msg: "args: required; send {} when the job has none"}
	}
	if _, err := fingerprint.Canonicalize(ev.Args); err != nil {
		fe := &FieldError{Field: "args", Code: "invalid_event", Msg: err.Error(), Err: err}
		var ferr *fingerprint.Error
		if errors.As(err, &ferr) {
			fe.Field, fe.Code = ferr.Path, ferr.Code()
		}
		return fe
	}
	if len(ev.Key) > debounce.MaxExplicitKeyLen || !utf8.ValidString(ev.Key) {
		return &FieldError{Field: "key", Code: "invalid_event", Msg: fmt.Sprintf("key: must be 1-%d bytes of UTF-8", debounce.MaxExplicitKeyLen)}
	}
	if strings.IndexByte(ev.Key, 0) >= 0 {
		// Postgres text cannot hold it: the INSERT would fail and abort the
		// producer's transaction with a raw encoding error.
		return &FieldError{Field: "key", Code: "invalid_event", Msg: "key: must not contain NUL bytes (a Postgres text column cannot store them)"}
	}
	if ev.TraceParent != "" && !debounce.ValidTraceParent(ev.TraceParent) {
		return &FieldError{Field: "traceparent", Code: "invalid_traceparent", Msg: "traceparent: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"}
	}
	return nil
}

// InsertJSON is Insert for args given as a Go value, marshalled to JSON.
func InsertJSON(ctx context.Context, tx pgx.Tx, jobType string, args any) (int64, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return 0, &FieldError{Field: "args", Code: "invalid_event", Msg: "args: " + err.Error(), Err: err}
	}
	return Insert(ctx, tx, debounce.Event{Type: jobType, Args: b})
}
