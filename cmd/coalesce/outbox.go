package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/outbox"
)

const outboxSynopsis = `outbox migrate [--postgres URL | --config FILE]
       outbox status [--postgres URL | --config FILE]
       outbox dead   [--postgres URL | --config FILE] [--limit N]
       outbox replay [--postgres URL | --config FILE] (--id N | --all)
       outbox schema

The Postgres transactional outbox: producers INSERT INTO coalesce_outbox
(type, args) in their own transaction; coalesce serve with outbox.postgres
relays committed rows to the policies.

  migrate  create or upgrade the tables (coalesce_outbox, coalesce_outbox_dead,
           coalesce_effects) and the notify trigger; safe to run again
  status   rows waiting, the oldest's age, dead rows (one JSON line)
  dead     the rows the relay could never decide, with why (NDJSON, oldest first)
  replay   put dead rows back into the outbox (after fixing the policy or the
           producer); they are decided again
  schema   print the migration's SQL, for your own migration tool

The URL comes from --postgres, else COALESCE_OUTBOX_POSTGRES, else the
outbox.postgres of --config.`

func runOutbox(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs := newFlags("outbox", outboxSynopsis, stderr)
		fs.Usage()
		if len(args) == 0 {
			return usagef("a subcommand is required: migrate, status, dead, replay or schema")
		}
		return nil
	}
	op := args[0]
	fs := newFlags("outbox "+op, outboxSynopsis, stderr)
	pgURL := fs.String("postgres", "", "Postgres URL (postgres://user:password@host:5432/db)")
	cfgFile := fs.String("config", "", "read outbox.postgres from this daemon configuration file")
	limit := fs.Int("limit", 100, "dead: list at most this many")
	id := fs.Int64("id", 0, "replay: the dead row's id (the \"id\" outbox dead lists; not its outbox_id)")
	all := fs.Bool("all", false, "replay: every dead row")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if op == "schema" {
		_, err := io.WriteString(stdout, outbox.Schema)
		return err
	}
	switch op {
	case "migrate", "status", "dead", "replay":
	default:
		return usagef("unknown subcommand %q: use migrate, status, dead, replay or schema", op)
	}
	if op == "replay" && (*id == 0) == !*all {
		return usagef("replay takes --id N or --all")
	}
	url := *pgURL
	if url == "" {
		url = os.Getenv("COALESCE_OUTBOX_POSTGRES")
	}
	if url == "" && *cfgFile != "" {
		cfg, err := config.Load(*cfgFile, nil)
		if err != nil {
			return err
		}
		url = cfg.Outbox.Postgres
	}
	if url == "" {
		return usagef("no database: give --postgres URL, COALESCE_OUTBOX_POSTGRES or a --config with outbox.postgres")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	enc := json.NewEncoder(stdout)
	switch op {
	case "migrate":
		if err := outbox.Migrate(cctx, conn); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "coalesce_outbox, coalesce_outbox_dead, coalesce_effects: schema %d\n", outbox.SchemaVersion)
		return nil
	case "status":
		st, err := outboxStatus(cctx, conn)
		if err != nil {
			return err
		}
		return enc.Encode(st)
	case "dead":
		rows, err := conn.Query(cctx, `SELECT dead_id, id, type, args, COALESCE(key, ''), created_at, dead_at, error_code, COALESCE(error_field, ''), error
			FROM coalesce_outbox_dead ORDER BY dead_id LIMIT $1`, *limit)
		if err != nil {
			return fmt.Errorf("outbox dead: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var d struct {
				ID        int64     `json:"id"`        // the dead row's own id: replay --id
				OutboxID  int64     `json:"outbox_id"` // the outbox row's id it had
				Type      string    `json:"type"`
				Args      string    `json:"args"`
				Key       string    `json:"key,omitempty"`
				CreatedAt time.Time `json:"created_at"`
				DeadAt    time.Time `json:"dead_at"`
				Code      string    `json:"code"`
				Field     string    `json:"field,omitempty"`
				Error     string    `json:"error"`
			}
			if err := rows.Scan(&d.ID, &d.OutboxID, &d.Type, &d.Args, &d.Key, &d.CreatedAt, &d.DeadAt, &d.Code, &d.Field, &d.Error); err != nil {
				return fmt.Errorf("outbox dead: %w", err)
			}
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
		return rows.Err()
	default: // replay
		tag, err := conn.Exec(cctx, `WITH d AS (DELETE FROM coalesce_outbox_dead WHERE $1 OR dead_id = $2 RETURNING *)
			INSERT INTO coalesce_outbox (type, args, key, traceparent) SELECT type, args, key, traceparent FROM d ORDER BY dead_id`, *all, *id)
		if err != nil {
			return fmt.Errorf("outbox replay: %w", err)
		}
		if tag.RowsAffected() == 0 && !*all {
			return fmt.Errorf("outbox replay: no dead row with id %d (see coalesce outbox dead)", *id)
		}
		fmt.Fprintf(stdout, "%d dead rows back in the outbox\n", tag.RowsAffected())
		return nil
	}
}

// outboxStatusLine is what outbox status prints.
type outboxStatusLine struct {
	Schema        int     `json:"schema"`
	Backlog       int64   `json:"backlog"`
	OldestSeconds float64 `json:"oldest_seconds"`
	Dead          int64   `json:"dead"`
	Effects       int64   `json:"effects"`
}

func outboxStatus(ctx context.Context, conn *pgx.Conn) (outboxStatusLine, error) {
	var st outboxStatusLine
	var comment *string
	if err := conn.QueryRow(ctx, `SELECT obj_description(to_regclass('coalesce_outbox'))`).Scan(&comment); err != nil {
		return st, fmt.Errorf("outbox status: %w", err)
	}
	if comment == nil {
		return st, fmt.Errorf("outbox status: no coalesce_outbox table: run coalesce outbox migrate")
	}
	if i := strings.Index(*comment, "schema "); i >= 0 {
		_, _ = fmt.Sscanf((*comment)[i+len("schema "):], "%d", &st.Schema)
	}
	n, age, err := outbox.Backlog(ctx, conn)
	if err != nil {
		return st, err
	}
	st.Backlog, st.OldestSeconds = n, age.Seconds()
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM coalesce_outbox_dead), (SELECT count(*) FROM coalesce_effects)`).Scan(&st.Dead, &st.Effects); err != nil {
		return st, fmt.Errorf("outbox status: %w", err)
	}
	return st, nil
}
