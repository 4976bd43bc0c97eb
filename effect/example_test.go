package effect_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/debounce"
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

// A job's effect key is the same for every delivery and for a replay of it
// from the dead letters.
func ExampleKeyOf() {
	job := &worker.Job{}
	job.Type = "charge_invoice"
	job.Key = debounce.ExplicitKey("charge_invoice", "INV-42")
	job.Token = 0x6895ae6e5cf2bd
	fmt.Println(effect.KeyOf(job))
	// Output: charge_invoice:0777c2ff44d8b5c9b641975b1de49a75cd0b337456a8a47013e54346e6996d3d.006895ae6e5cf2bd
}
