package publisher_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	key, err := debounce.ParseRoundKey(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	const tok = debounce.Token(0x0123456789abcdef)
	hex := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"run", publisher.Subjects{}.Run("recompute", key, tok), "co.run.recompute." + hex + ".0123456789abcdef"},
		{"dotted run", publisher.Subjects{}.Run("billing.recompute", key, tok), "co.run.billing.recompute." + hex + ".0123456789abcdef"},
		{"runs of a type", publisher.Subjects{}.Runs("billing.recompute"), "co.run.billing.recompute.*.*"},
		{"run type", publisher.Subjects{}.RunType("co.run.billing.recompute." + hex + ".0123456789abcdef"), "billing.recompute"},
		{"not a run subject", publisher.Subjects{}.RunType("co.jobs.recompute"), ""},
		{"run subject without a round", publisher.Subjects{}.RunType("co.run.x"), ""},
		{"all runs", publisher.Subjects{}.AllRuns(), "co.run.>"},
		{"job", publisher.Subjects{}.Job("recompute"), "co.jobs.recompute"},
		{"dotted job", publisher.Subjects{}.Job("billing.recompute"), "co.jobs.billing.recompute"},
		{"schedule", publisher.Subjects{}.Schedule("billing.recompute", key, tok), "co.sched.billing.recompute." + hex + ".0123456789abcdef"},
		{"zero token is every round", publisher.Subjects{}.Schedule("recompute", key, 0), "co.sched.recompute." + hex + ".*"},
		{"key schedules", publisher.Subjects{}.KeySchedules("recompute", key), "co.sched.recompute." + hex + ".*"},
		{"dead", publisher.Subjects{}.Dead("recompute"), "co.dead.recompute"},
		{"all jobs", publisher.Subjects{}.AllJobs(), "co.jobs.>"},
		{"prefix", publisher.Subjects{Prefix: "app.co"}.Job("x"), "app.co.jobs.x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
	if got := (publisher.Subjects{}).Consumer("a.b"); !reflect.DeepEqual(got, []string{"co.run.a.b.*.*", "co.jobs.a.b"}) {
		t.Fatalf("consumer filters %v", got)
	}
	if got := (publisher.Subjects{}).Stream(); !reflect.DeepEqual(got, []string{"co.sched.>", "co.run.>", "co.jobs.>", "co.dead.>"}) {
		t.Fatalf("stream subjects %v", got)
	}
}
