package effect_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/effect"
	"github.com/coalesce-io/coalesce/worker"
)

// A handler that charges an invoice at most once, whatever Redis forgot:
// the charge row and the effect record commit together. (It needs a
// Postgres, so it is compiled, not run.)
func ExampleOnce() {
	var pool *pgxpool.Pool // pgxpool.New(ctx, "postgres://...")
	handler := func(ctx context.Context, job *worker.Job) error {
		ran, err := effect.Once(ctx, pool, effect.RecordOf(job), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO charges (invoice, amount) VALUES ($1, $2)`, job.Args, 100)
			return err
		})
		if err == nil && !ran {
			log.Printf("invoice of round %s was charged before; acknowledged", job.Token)
		}
		return err
	}
	_ = handler
}
