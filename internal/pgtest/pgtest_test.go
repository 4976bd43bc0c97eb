package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two tests' databases do not see each other's tables, and a restart keeps
// the data on the same port.
func TestDatabasesAndRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.DB(t), pgtest.DB(t)
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, `CREATE TABLE mine (x int)`); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var found bool
	if err := cb.QueryRow(ctx, `SELECT to_regclass('mine') IS NOT NULL`).Scan(&found); err != nil || found {
		t.Fatalf("database b sees a's table (%v, %v)", found, err)
	}

	s, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	if err := s.Restart(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c, err = pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var x int
	if err := c.QueryRow(ctx, `SELECT x FROM kept`).Scan(&x); err != nil || x != 7 {
		t.Fatalf("after the restart: %d, %v", x, err)
	}
}
