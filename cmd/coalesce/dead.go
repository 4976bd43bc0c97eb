package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

const deadSynopsis = `dead list [--type T] [--round R] [--code C] [--limit N]
       dead show --seq N
       dead replay (--seq N | --type T [--round R] [--code C] | --all [--code C])
       dead purge (--seq N | --type T [--round R] [--code C])

Dead letters: jobs a worker gave up on (co.dead.<type>, with why, their
attempts and their round's summary) and stored events the durable intake
could never decide (co.dead._ingest.<type>). They stay in the job stream
until replayed or purged.

  list    oldest first, with reason, attempts and age (GET /v1/dead)
  show    one, with its headers and args (GET /v1/dead/{seq})
  replay  publish it again: a job runs once more with the summary and items
          its dead letter kept and a fresh attempt count (release
          "replayed"); a stored event goes back to the intake. The dead
          letter is then deleted; a second replay is deduplicated.
          (POST /v1/dead/{seq}/replay). With --type (or --all) every letter
          matching the filter, answering how many (POST /v1/dead:replay)
  purge   delete one, or every letter of a type (of a round, with an
          error code) (DELETE /v1/dead...)

--code filters by the error code a worker gave (Coalesce-Error-Code:
permanent, attempts, refused, undecodable, ...).`

func runDead(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs := newFlags("dead", deadSynopsis, stderr)
		fs.Usage()
		if len(args) == 0 {
			return usagef("a subcommand is required: list, show, replay or purge")
		}
		return nil
	}
	op := args[0]
	fs := newFlags("dead "+op, deadSynopsis, stderr)
	var c clientFlags
	c.register(fs)
	typ := fs.String("type", "", "job type")
	round := fs.String("round", "", "only this round's (16 hex digits)")
	limit := fs.Int("limit", 100, "list at most this many")
	code := fs.String("code", "", "only letters with this error code (permanent, attempts, refused, undecodable, ...)")
	all := fs.Bool("all", false, "replay: every dead letter of every type matching --code")
	seq := fs.Uint64("seq", 0, "the dead letter's sequence (from list)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	q := url.Values{}
	if *typ != "" {
		q.Set("type", *typ)
	}
	if *round != "" {
		q.Set("round", *round)
	}
	if *code != "" {
		q.Set("code", *code)
	}
	one := "/v1/dead/" + strconv.FormatUint(*seq, 10)
	var method, path string
	switch op {
	case "list":
		q.Set("limit", strconv.Itoa(*limit))
		method, path = http.MethodGet, "/v1/dead?"+q.Encode()
	case "replay":
		switch {
		case *seq != 0 && (*typ != "" || *all):
			return usagef("dead replay takes --seq or a filter (--type, --all), not both")
		case *seq != 0:
			method, path = http.MethodPost, one+"/replay"
		case *typ != "" || *all:
			method, path = http.MethodPost, "/v1/dead:replay?"+q.Encode()
		default:
			return usagef("dead replay needs --seq N, --type T or --all (see coalesce dead list)")
		}
	case "show":
		if *seq == 0 {
			return usagef("dead show needs --seq (see coalesce dead list)")
		}
		method, path = http.MethodGet, one
	case "purge":
		switch {
		case *seq != 0:
			method, path = http.MethodDelete, one
		case *typ != "":
			method, path = http.MethodDelete, "/v1/dead?"+q.Encode()
		default:
			return usagef("dead purge needs --seq or --type")
		}
	default:
		return usagef("unknown subcommand %q: use list, show, replay or purge", op)
	}
	out, err := c.do(ctx, method, path, "", nil)
	if err != nil {
		return err
	}
	return writeIndented(stdout, out)
}
