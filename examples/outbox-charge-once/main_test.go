package main

import (
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestExample runs the example on a throwaway Postgres and in-process NATS
// and Redis: run fails unless the retried job charged the invoice once.
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(pgtest.DB(t), "", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "attempt 2: already charged") {
		t.Error("the retry did not find the record")
	}
}
