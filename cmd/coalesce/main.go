// Command coalesce is the coalescing daemon and its tools: fingerprint args,
// submit events, inspect and cancel rounds, run workers.
//
//	coalesce <command> [flags]
//
// Run `coalesce help` for the commands and `coalesce <command> --help` for
// each one's flags. Exit status: 0 success, 1 failure, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error caused by how the command was called (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError carries a chosen exit status with nothing more to print, for a
// command that already reported its failures line by line.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the coalescing daemon (HTTP and NATS intake, cron, metrics)", runServe},
		{"submit", "send events to the daemon and print the decisions", runSubmit},
		{"explain", "show what the daemon would do with an event, changing nothing", runExplain},
		{"inspect", "show the round pending for a key", runInspect},
		{"cancel", "cancel the round pending for a key", runCancel},
		{"work", "run jobs with a command (job JSON on stdin) or an HTTP handler (--post), any language", runWork},
		{"dead", "list, show, replay or purge dead letters", runDead},
		{"outbox", "set up the Postgres transactional outbox (migrate), show its backlog and dead rows", runOutbox},
		{"dedupe-stream", "remove duplicate pending jobs from an already flooded stream (dry run by default)", runDedupeStream},
		{"bench", "load-generate events and report throughput, latency, Redis CPU and memory", runBench},
		{"simulate", "replay an event log through the policies in virtual time: jobs, latency, side by side", runSimulate},
		{"fingerprint", "print the fp1 fingerprint of job args (one, or NDJSON from stdin)", runFingerprint},
		{"version", "print the version, VCS revision, Go and embedded nats-server versions", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		printUsage(stdout)
		return exitOK
	}
	if name == "--version" || name == "-version" {
		fmt.Fprint(stdout, versionText())
		return exitOK
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, args[1:], stdin, stdout, stderr)
		var ue usageError
		var ee exitError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, &ee):
			return ee.code
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "coalesce %s: %v (see coalesce %s --help)\n", name, err, name)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "coalesce %s: %v\n", name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(stderr, "coalesce: unknown command %q (see coalesce help)\n", name)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "coalesce turns storms of events into exactly the jobs needed.")
	fmt.Fprintln(w, "\nUsage: coalesce <command> [flags]\n\nCommands:")
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'coalesce <command> --help' for a command's flags.")
}

// newFlags returns a flag set that reports errors instead of exiting, with a
// usage text led by the command's synopsis.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("coalesce "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: coalesce %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors (the flag
// package has already printed the message and usage).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError{exitUsage}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// flagGiven reports whether the flag was set on the command line (even to "").
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
