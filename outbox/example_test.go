package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/outbox"
)

// Insert checks an event before writing it: a mistake names its field.
func ExampleCheck() {
	err := outbox.Check(debounce.Event{Type: "sync_orders", Args: []byte(`{"tenant_id":9007199254740993}`)})
	var fe *outbox.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, fe.Code)
	}
	// Output: args.tenant_id unsafe_integer
}

// A relay's Coalescer fails closed whatever the policies say, so an outage
// keeps rows in the outbox.
func ExampleFailClosed() {
	policies := []debounce.Policy{{Type: "sync_orders", Mode: debounce.ModeDebounce, Fail: debounce.FailOpen}}
	fmt.Println(outbox.FailClosed(policies)[0].Fail, policies[0].Fail)
	// Output: closed open
}

// The producer writes its change and its event in one transaction; a relay
// submits committed rows. (It needs a Postgres, so it is compiled, not run.)
func ExampleInsert() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 10 WHERE id = 42`); err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.Insert(ctx, tx, debounce.Event{Type: "recompute_balance", Args: []byte(`{"account_id":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// The relay (coalesce serve does this with outbox.postgres):
	var co *debounce.Coalescer // debounce.New with outbox.FailClosed(policies)
	relay, err := outbox.New(outbox.Config{Pool: pool, Coalescer: co})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = relay.Run(ctx) }()
}
