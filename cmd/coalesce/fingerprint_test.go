package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/fingerprint"
)

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestFingerprintCommand(t *testing.T) {
	t.Parallel()
	want, _ := fingerprint.FromJSON("recompute_financials", []byte(`{"tenant_id":42}`))
	tests := []struct {
		name      string
		args      []string
		stdin     string
		code      int
		stdout    string
		stderrHas string
	}{
		{"one document", []string{"fingerprint", "--type", "recompute_financials", "--args", `{ "tenant_id" : 42.0 }`}, "", 0, want.String() + "\n", ""},
		{"key fields", []string{"fingerprint", "--type", "recompute_financials", "--fields", "tenant_id", "--args", `{"tenant_id":42,"order":7}`}, "", 0, want.String() + "\n", ""},
		{"canonical", []string{"fingerprint", "--type", "t", "--canonical", "--args", `{"b":1.0,"a":"\u00e9"}`}, "", 0, "{\"a\":\"é\",\"b\":1}\n", ""},
		{"bad args", []string{"fingerprint", "--type", "t", "--args", `{"id":9007199254740993}`}, "", 1, "", "args.id: integer 9007199254740993 exceeds 2^53"},
		{"empty args given", []string{"fingerprint", "--type", "t", "--args", ""}, "", 1, "", "empty input"},
		{"missing type", []string{"fingerprint", "--args", "{}"}, "", 2, "", "--type is required"},
		{"invalid type", []string{"fingerprint", "--type", "a b", "--args", "{}"}, "", 2, "", `--type: "a b" has ' '`},
		{"unknown flag", []string{"fingerprint", "--nope"}, "", 2, "", "flag provided but not defined"},
		{"stray argument", []string{"fingerprint", "--type", "t", "extra"}, "", 2, "", `unexpected argument "extra"`},
		{"empty field name", []string{"fingerprint", "--type", "t", "--fields", "a,,b"}, "", 2, "", "empty field name"},
		{"help", []string{"fingerprint", "--help"}, "", 0, "", "Usage: coalesce fingerprint"},
		{"unknown command", []string{"frobnicate"}, "", 2, "", `unknown command "frobnicate"`},
		{"no command", nil, "", 2, "", "Usage: coalesce <command>"},
		{"NDJSON: one line out per line in, errors in place", []string{"fingerprint", "--type", "recompute_financials"},
			"{\"tenant_id\":42}\n{\"a\":1,\"a\":2}\n\n{\"tenant_id\":42.0}\r\n", 1,
			want.String() + "\nerror: args.a: duplicate member name \"a\"; names must be unique (I-JSON)\nerror: args: invalid JSON at byte 0: empty input, expected a JSON value\n" + want.String() + "\n",
			"2 line(s) failed"},
		{"NDJSON without a final newline", []string{"fingerprint", "--type", "recompute_financials"}, `{"tenant_id":42}`, 0, want.String() + "\n", ""},
		{"NDJSON empty input", []string{"fingerprint", "--type", "t"}, "", 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tt.stdin, tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if tt.stdout != "" || tt.code == 0 && tt.stderrHas == "" {
				if stdout != tt.stdout {
					t.Errorf("stdout\n got %q\nwant %q", stdout, tt.stdout)
				}
			}
			if !strings.Contains(stderr+stdout, tt.stderrHas) {
				t.Errorf("output %q does not contain %q", stderr+stdout, tt.stderrHas)
			}
		})
	}
}

func TestFingerprintCommandLongLinesAndVolume(t *testing.T) {
	t.Parallel()
	var in, want strings.Builder
	s, _ := fingerprint.NewScheme("t")
	long := `{"blob":"` + strings.Repeat("x", 200<<10) + `"}` // longer than the read buffer
	in.WriteString(long + "\n")
	fp, _ := s.FromJSON([]byte(long))
	want.WriteString(fp.String() + "\n")
	for i := range 20000 {
		doc := fmt.Sprintf(`{"tenant_id":"tenant-%d","n":%d}`, i%100, i)
		in.WriteString(doc + "\n")
		fp, _ := s.FromJSON([]byte(doc))
		want.WriteString(fp.String() + "\n")
	}
	code, stdout, stderr := runCLI(t, in.String(), "fingerprint", "--type", "t")
	if code != 0 || stdout != want.String() {
		t.Fatalf("exit %d, stderr %q; output matches: %v", code, stderr, stdout == want.String())
	}
}
