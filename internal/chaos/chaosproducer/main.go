// Command chaosproducer is the outbox producer of the chaos suite: it writes
// events into coalesce_outbox in its own transactions, as an application
// would, and logs each transaction's fate (one JSON line, unbuffered) once
// Postgres has answered: committed, or rolled back on purpose. A SIGKILL
// between the commit and its log line leaves a committed row unlogged (the
// checks do not require it, and accept it in a job); a transaction in flight
// at the kill is rolled back by Postgres.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/outbox"
)

// Line is one transaction's fate.
type Line struct {
	EIDs     []string `json:"eids"`
	Tenants  []string `json:"tenants"`
	Sent     int64    `json:"sent"` // unix ns, before COMMIT (or ROLLBACK) was sent
	At       int64    `json:"at"`   // unix ns, after Postgres answered
	Rollback bool     `json:"rollback,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosproducer:", err)
		os.Exit(1)
	}
}

func run() error {
	pg := flag.String("postgres", "", "Postgres URL")
	out := flag.String("out", "", "transaction log (JSON lines, appended)")
	prefix := flag.String("prefix", "p", "event id prefix (unique per incarnation)")
	jobType := flag.String("type", "obx", "job type")
	tenants := flag.Int("tenants", 20, "tenants")
	rate := flag.Int("rate", 200, "transactions per second")
	rollback := flag.Int("rollback-pct", 10, "percentage of transactions rolled back on purpose")
	addr := flag.String("addr", "", "serve /healthz here")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	conn, err := pgx.Connect(ctx, *pg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if *addr != "" {
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }), ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	tick := time.NewTicker(time.Second / time.Duration(max(*rate, 1)))
	defer tick.Stop()
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		var line Line
		for range 1 + rand.IntN(3) {
			seq++
			eid := fmt.Sprintf("%s-%d", *prefix, seq)
			tenant := fmt.Sprintf("t%d", rand.IntN(*tenants))
			args := fmt.Sprintf(`{"tenant":%q,"eid":%q}`, tenant, eid)
			if _, err := outbox.Insert(ctx, tx, debounce.Event{Type: *jobType, Args: []byte(args)}); err != nil {
				return err
			}
			line.EIDs, line.Tenants = append(line.EIDs, eid), append(line.Tenants, tenant)
		}
		line.Sent = time.Now().UnixNano()
		if rand.IntN(100) < *rollback {
			err, line.Rollback = tx.Rollback(ctx), true
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			return err
		}
		line.At = time.Now().UnixNano()
		b, _ := json.Marshal(line)
		if _, err := f.Write(append(b, '\n')); err != nil {
			return err
		}
	}
}
