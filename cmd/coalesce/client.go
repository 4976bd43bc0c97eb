package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/redact"
)

// DefaultServer is where the client commands find the daemon.
const DefaultServer = "http://127.0.0.1:8080"

// clientFlags are the flags of commands that talk to the daemon.
type clientFlags struct {
	server, token, config string
	timeout               time.Duration
	resolved              bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", "", "daemon URL (env COALESCE_SERVER; else from --config's http.listen; else "+DefaultServer+")")
	fs.StringVar(&c.token, "token", "", "bearer token (env COALESCE_TOKEN; else --config's first http.tokens)")
	fs.StringVar(&c.config, "config", "", "the daemon's configuration file: where it listens and its token")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "request timeout")
}

// resolve settles the server and the token: the flag, else the
// environment, else the configuration file, else the default.
func (c *clientFlags) resolve() error {
	if c.resolved {
		return nil
	}
	c.resolved = true
	if c.server == "" {
		c.server = os.Getenv("COALESCE_SERVER")
	}
	if c.token == "" {
		c.token = os.Getenv("COALESCE_TOKEN")
	}
	if c.config != "" && (c.server == "" || c.token == "") {
		cfg, err := config.Load(c.config, os.Getenv)
		if err != nil {
			return err
		}
		if c.server == "" {
			c.server = listenURL(cfg.HTTP.Listen)
		}
		if c.token == "" && len(cfg.HTTP.Tokens) > 0 {
			c.token = cfg.HTTP.Tokens[0]
		}
	}
	if c.server == "" {
		c.server = DefaultServer
	}
	return nil
}

// listenURL is the URL a client on this machine reaches a listen address
// at: a wildcard host is the loopback.
func listenURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// do sends one request and returns the body of a 2xx answer; any other
// answer is an error carrying the daemon's message.
func (c *clientFlags) do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	if err := c.resolve(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.server, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, usagef("--server %q: %v", redact.URL(c.server), err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the daemon at %s (is `coalesce serve` running? --server sets where): %v", redact.URL(c.server), redact.Error(err))
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Code, Message, Field string } `json:"error"`
		}
		if json.Unmarshal(out, &e) == nil && e.Error.Message != "" {
			return out, &httpError{status: resp.StatusCode, code: e.Error.Code, msg: e.Error.Message}
		}
		return out, &httpError{status: resp.StatusCode, msg: strings.TrimSpace(string(out))}
	}
	return out, nil
}

type httpError struct {
	status    int
	code, msg string
}

func (e *httpError) Error() string {
	if e.code != "" {
		return fmt.Sprintf("%d %s: %s", e.status, e.code, e.msg)
	}
	return fmt.Sprintf("%d: %s", e.status, e.msg)
}

// eventFlags build one event from flags.
type eventFlags struct {
	typ, args, key string
}

func (e *eventFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.typ, "type", "", "job type")
	fs.StringVar(&e.args, "args", "", "args as one JSON document")
	fs.StringVar(&e.key, "key", "", "explicit round key instead of the args' fingerprint")
}

func (e *eventFlags) body() ([]byte, error) {
	if e.typ == "" {
		return nil, usagef("--type is required")
	}
	if e.args == "" {
		return nil, usagef("--args is required (send '{}' for none)")
	}
	if !json.Valid([]byte(e.args)) {
		return nil, usagef("--args is not valid JSON: %.80s", e.args)
	}
	ev := map[string]any{"type": e.typ, "args": json.RawMessage(e.args)}
	if e.key != "" {
		ev["key"] = e.key
	}
	return json.Marshal(ev)
}

const submitSynopsis = `submit --type T --args JSON [--key K] | submit < events.ndjson

Sends events to the daemon and prints its decisions as JSON, one per line.
With --type and --args, one event (POST /v1/events). Without them, NDJSON
events on stdin ({"type":...,"args":...} per line) go in one batch
(POST /v1/events:batch); a bad line is answered in place and the exit status
is 1 if any line failed.`

func runSubmit(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("submit", submitSynopsis, stderr)
	var c clientFlags
	c.register(fs)
	var e eventFlags
	e.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if e.typ != "" || e.args != "" {
		body, err := e.body()
		if err != nil {
			return err
		}
		out, err := c.do(ctx, http.MethodPost, "/v1/events", "application/json", body)
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	body, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	out, err := c.do(ctx, http.MethodPost, "/v1/events:batch", "application/x-ndjson", body)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(out); err != nil {
		return err
	}
	if failed := bytes.Count(out, []byte(`{"error":`)); failed > 0 {
		fmt.Fprintf(stderr, "coalesce submit: %d event(s) refused\n", failed)
		return exitError{exitFailure}
	}
	return nil
}

const explainSynopsis = `explain --type T --args JSON [--key K]

Shows what the daemon would do with an event, changing nothing: the
fingerprint, the round key, the canonical args that were hashed, the policy,
the round now pending for the key, and the outcome a submit would get.`

func runExplain(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("explain", explainSynopsis, stderr)
	var c clientFlags
	c.register(fs)
	var e eventFlags
	e.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	body, err := e.body()
	if err != nil {
		return err
	}
	out, err := c.do(ctx, http.MethodPost, "/v1/explain", "application/json", body)
	if err != nil {
		return err
	}
	return writeIndented(stdout, out)
}

func writeIndented(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, err = w.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// roundPath finds the round a command means: --round-key, or the key of
// --args (and --key) worked out by the daemon.
func roundPath(ctx context.Context, c *clientFlags, e *eventFlags, roundKey string) (string, error) {
	if e.typ == "" {
		return "", usagef("--type is required")
	}
	if roundKey == "" {
		body, err := e.body()
		if err != nil {
			return "", usagef("give --round-key HEX, or --args (and --key) to find it")
		}
		out, err := c.do(ctx, http.MethodPost, "/v1/explain", "application/json", body)
		if err != nil {
			return "", err
		}
		var ex struct{ Key string }
		if err := json.Unmarshal(out, &ex); err != nil {
			return "", err
		}
		roundKey = ex.Key
	}
	return "/v1/rounds/" + e.typ + "/" + roundKey, nil
}

const inspectSynopsis = `inspect --type T (--round-key HEX | --args JSON [--key K])

Shows the round pending for a key: its token, events so far, first and last
seen, due time, whether it is published; exit status 1 when none is pending.`

func runInspect(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	return roundCommand(ctx, "inspect", inspectSynopsis, http.MethodGet, args, stdout, stderr)
}

const cancelSynopsis = `cancel --type T (--round-key HEX | --args JSON [--key K]) [--round TOKEN]

Cancels a round of a key: deletes its reservation and purges its schedule
and job, so its job never runs. Events from then on open a new round.

--round names the round (the 16 hex digits of a decision's "round"): the
cancel is then fenced, and answers "other round" (exit 1) rather than
cancel the next round when repeated after its round ended ("already
cancelled", exit 1, when repeated after it succeeded). Without it the
round pending now is looked up and cancelled, which a repeated command
would do again to the next one.`

func runCancel(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	return roundCommand(ctx, "cancel", cancelSynopsis, http.MethodDelete, args, stdout, stderr)
}

func roundCommand(ctx context.Context, name, synopsis, method string, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(name, synopsis, stderr)
	var c clientFlags
	c.register(fs)
	var e eventFlags
	e.register(fs)
	roundKey := fs.String("round-key", "", "the round key (64 hex digits, the key field of a decision)")
	var token *string
	if method == http.MethodDelete {
		token = fs.String("round", "", "the round to cancel: 16 hex digits (a decision's round); default the round pending now")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path, err := roundPath(ctx, &c, &e, *roundKey)
	if err != nil {
		return err
	}
	if token != nil {
		if *token == "" {
			// The round pending now: not fenced (see the synopsis).
			out, err := c.do(ctx, http.MethodGet, path, "", nil)
			var he *httpError
			if errors.As(err, &he) && he.code == "not_found" {
				return fmt.Errorf("no round pending for %s (%s)", e.typ, strings.TrimPrefix(path, "/v1/rounds/"+e.typ+"/"))
			}
			if err != nil {
				return err
			}
			var pending struct{ Round string }
			if err := json.Unmarshal(out, &pending); err != nil {
				return err
			}
			*token = pending.Round
		}
		path += "?round=" + url.QueryEscape(*token)
	}
	out, err := c.do(ctx, method, path, "", nil)
	var he *httpError
	if errors.As(err, &he) && he.code == "not_found" {
		return fmt.Errorf("no round pending for %s (%s)", e.typ, strings.TrimPrefix(path, "/v1/rounds/"+e.typ+"/"))
	}
	if err != nil {
		return err
	}
	return writeIndented(stdout, out)
}
