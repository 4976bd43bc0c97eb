package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/coalesce-io/coalesce/fingerprint"
)

const fingerprintSynopsis = `fingerprint --type T [--fields a,b] [--args JSON] [--canonical]

Prints the fp1 fingerprint of job args: SHA-256 over "fp1" LF type LF the
RFC 8785 canonical form of the args (or of only the --fields members).

With --args, prints one line of 64 hex digits. Without it, reads NDJSON on
stdin, one args document per line, and prints one line per input line, in
order: the hex, or "error: <message>". Exit status 1 when any line failed.

Examples:
  coalesce fingerprint --type recompute_financials --args '{"tenant_id":42}'
  coalesce fingerprint --type recompute_financials --fields tenant_id < events.ndjson`

func runFingerprint(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("fingerprint", fingerprintSynopsis, stderr)
	jobType := fs.String("type", "", "job type (required), e.g. recompute_financials")
	fields := fs.String("fields", "", "comma-separated top-level key fields to fingerprint instead of all args")
	argsJSON := fs.String("args", "", "args as one JSON document; without it, NDJSON is read from stdin")
	canonical := fs.Bool("canonical", false, "print the canonical JSON that is hashed instead of the fingerprint")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *jobType == "" {
		return usagef("--type is required")
	}
	var keyFields []string
	if *fields != "" {
		for f := range strings.SplitSeq(*fields, ",") {
			if f = strings.TrimSpace(f); f == "" {
				return usagef("--fields %q has an empty field name", *fields)
			}
			keyFields = append(keyFields, f)
		}
	}
	scheme, err := fingerprint.NewScheme(*jobType, keyFields...)
	if err != nil {
		return usagef("--%v", err)
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	line := func(doc []byte, buf []byte) ([]byte, error) {
		if *canonical {
			return scheme.AppendCanonical(buf, doc)
		}
		fp, err := scheme.FromJSON(doc)
		if err != nil {
			return buf, err
		}
		return fp.AppendText(buf)
	}
	if flagGiven(fs, "args") {
		b, err := line([]byte(*argsJSON), nil)
		if err != nil {
			return err
		}
		out.Write(b)
		out.WriteByte('\n')
		return out.Flush()
	}

	in := bufio.NewReaderSize(stdin, 64<<10)
	failed := 0
	var buf []byte
	for {
		doc, readErr := in.ReadSlice('\n')
		if errors.Is(readErr, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole.
			long := append([]byte(nil), doc...)
			for errors.Is(readErr, bufio.ErrBufferFull) {
				doc, readErr = in.ReadSlice('\n')
				long = append(long, doc...)
			}
			doc = long
		}
		if len(doc) == 0 && readErr != nil {
			break
		}
		doc = trimEOL(doc)
		var err error
		if buf, err = line(doc, buf[:0]); err != nil {
			failed++
			buf = append(append(buf[:0], "error: "...), err.Error()...)
		}
		buf = append(buf, '\n')
		if _, err := out.Write(buf); err != nil {
			return err
		}
		if readErr != nil {
			if readErr != io.EOF {
				return readErr
			}
			break
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "coalesce fingerprint: %d line(s) failed\n", failed)
		return exitError{exitFailure}
	}
	return nil
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}
