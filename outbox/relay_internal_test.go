package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/coalesce-io/coalesce/internal/pgtest"
)

// TestPassTransactionIsPinned: a pass's transaction is READ COMMITTED and
// has its own idle-in-transaction timeout, whatever the database's
// defaults (here SERIALIZABLE and 300 ms).
func TestPassTransactionIsPinned(t *testing.T) {
	t.Parallel()
	_, url := pgtest.Pool(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "300"
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r := &Relay{cfg: Config{Pool: pool, PassTimeout: DefaultPassTimeout}}
	ctx := context.Background()
	tx, err := r.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var iso, idle string
	if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation'), current_setting('idle_in_transaction_session_timeout')`).Scan(&iso, &idle); err != nil {
		t.Fatal(err)
	}
	if iso != "read committed" || idle != "100s" {
		t.Errorf("the pass's transaction: isolation %q, idle timeout %q; want read committed and 100s (3 pass timeouts and 10 s)", iso, idle)
	}
}
