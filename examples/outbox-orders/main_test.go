package main

import (
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestExample runs the example on a throwaway Postgres and in-process NATS
// and Redis: run fails unless every committed order reached its tenant's
// job and the rolled-back one none.
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(pgtest.DB(t), "", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "rolled back with its event") {
		t.Error("the declined order was not reported")
	}
}
