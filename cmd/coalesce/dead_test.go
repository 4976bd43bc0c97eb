package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/worker"
)

const deadConfig = `policies:
  digest:
    mode: debounce
    window: 1s
    payload: accumulate
    key_fields: [user]
`

// TestDeadLettersEndToEnd: a job whose --exec command refuses it (exit
// 100) is dead-lettered; coalesce dead lists it with its reason, attempts
// and summary; replayed while the handler still fails, it dies again as a
// dead letter naming the first (replay_of), and a second replay of the first
// answers deduplicated with that dead letter; once fixed, the replay runs it
// once more with the same items and release "replayed", and deletes the dead
// letter (a second replay is deduplicated); purge deletes a type's.
func TestDeadLettersEndToEnd(t *testing.T) {
	t.Parallel()
	sd := serveEmbedded(t, deadConfig)
	fixed := filepath.Join(sd.dir, "fixed")
	runs := filepath.Join(sd.dir, "runs.ndjson")
	script := `doc=$(cat); [ -e ` + fixed + ` ] || exit 100; printf '%s\n' "$doc" >> ` + runs
	work := start(t, "work", "--redis", "redis://"+sd.redisAddr+"/0", "--nats", "nats://"+sd.natsAddr, "--config", sd.cfgPath,
		"--type", "digest", "--exec", script)
	for _, n := range []string{"1", "2", "3"} {
		if code, out, stderr := runBin(t, "", "submit", "--server", sd.base, "--type", "digest", "--args", `{"user":"ann","n":`+n+`}`); code != 0 {
			t.Fatalf("submit: %d %s %s", code, out, stderr)
		}
	}
	var list struct {
		DeadLetters []admin.DeadLetter `json:"dead_letters"`
	}
	dead := func(args ...string) (int, string, string) {
		return runBin(t, "", append([]string{"dead"}, append(args, "--server", sd.base)...)...)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(list.DeadLetters) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter within 15 s:\n%s", work.out.String())
		}
		time.Sleep(200 * time.Millisecond)
		code, out, stderr := dead("list", "--type", "digest")
		if code != 0 {
			t.Fatalf("dead list: %d %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("dead list: %v: %s", err, out)
		}
	}
	dl := list.DeadLetters[0]
	if dl.Type != "digest" || !strings.Contains(dl.Reason, "permanent failure") || dl.Attempts != 1 || dl.Summary == nil || len(dl.Summary.Items) != 3 {
		t.Fatalf("dead letter %+v", dl)
	}
	seq := jsonNumber(dl.Seq)
	if code, out, _ := dead("show", "--seq", seq); code != 0 || !strings.Contains(out, `"Coalesce-Key"`) {
		t.Errorf("dead show: %d %s", code, out)
	}
	// Replayed while the handler still fails: the job dies again, as a new
	// dead letter that names the one it was replayed from.
	replay := func(seq string) replayAnswer {
		t.Helper()
		code, out, stderr := dead("replay", "--seq", seq)
		var r replayAnswer
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || jsonNumber(r.Seq) != seq || r.Subject == "" {
			t.Fatalf("dead replay --seq %s: exit %d, %s %s; want exit 0 and the replay", seq, code, out, stderr)
		}
		return r
	}
	if r := replay(seq); r.Deduplicated || len(r.DeadAgain) > 0 {
		t.Fatalf("the first replay: %+v", r)
	}
	var again deadAgain
	for deadline := time.Now().Add(15 * time.Second); again.Seq == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replayed job, failing again, left no dead letter within 15 s:\n%s", work.out.String())
		}
		var l2 struct {
			DeadLetters []deadAgain `json:"dead_letters"`
		}
		if _, out, _ := dead("list", "--type", "digest"); json.Unmarshal([]byte(out), &l2) == nil {
			for _, l := range l2.DeadLetters {
				if l.Seq != dl.Seq {
					again = l
				}
			}
		}
	}
	if again.ReplayOf != dl.Seq || again.Summary == nil || len(again.Summary.Items) != 3 {
		t.Fatalf("the replayed job's dead letter: %+v; want replay_of %d and the 3 items", again, dl.Seq)
	}
	// A second replay is deduplicated (README: "a second replay of it is
	// deduplicated") and reports the dead letter the first one left.
	if r := replay(seq); !r.Deduplicated || !slices.Equal(r.DeadAgain, []uint64{again.Seq}) {
		t.Fatalf("a second replay of %s: %+v; want deduplicated, dead_again [%d]", seq, r, again.Seq)
	}
	if err := os.WriteFile(fixed, nil, 0o644); err != nil { // the handler is fixed
		t.Fatal(err)
	}
	seq = jsonNumber(again.Seq)
	if r := replay(seq); r.Deduplicated {
		t.Fatalf("replay of the new dead letter: %+v", r)
	}
	var job worker.Document
	for deadline := time.Now().Add(15 * time.Second); job.Type == ""; time.Sleep(100 * time.Millisecond) {
		if raw, _ := os.ReadFile(runs); len(raw) > 0 {
			if err := json.Unmarshal([]byte(strings.SplitN(string(raw), "\n", 2)[0]), &job); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replayed job never ran:\n%s", work.out.String())
		}
	}
	if job.Release != "replayed" || job.Attempt != 1 || job.Summary.Events != 3 || len(job.Summary.Items) != 3 {
		t.Errorf("the replayed job: release %s, attempt %d, %d events, %d items; want replayed, 1, 3, 3", job.Release, job.Attempt, job.Summary.Events, len(job.Summary.Items))
	}
	if r := replay(seq); !r.Deduplicated || len(r.DeadAgain) != 0 {
		t.Errorf("a second replay of %s, whose job ran: %+v; want deduplicated, nothing dead again", seq, r)
	}
	if code, _, stderr := dead("replay", "--seq", "999999"); code != 1 || !strings.Contains(stderr, "404") {
		t.Errorf("replay of a dead letter that never was: exit %d, %s; want 404", code, stderr)
	}
	if code, out, _ := dead("list", "--type", "digest"); code != 0 || !strings.Contains(out, `"dead_letters": []`) {
		t.Errorf("after the replay the list is %s", out)
	}
	// Purge: another dead letter, then the type's.
	if err := os.Remove(fixed); err != nil {
		t.Fatal(err)
	}
	runBin(t, "", "submit", "--server", sd.base, "--type", "digest", "--args", `{"user":"bo","n":1}`)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, out, _ := dead("list", "--type", "digest"); strings.Contains(out, `"seq"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no second dead letter")
		}
	}
	// Filters by error code: the handler's exit 100 is "permanent".
	if code, out, _ := dead("list", "--type", "digest", "--code", "attempts"); code != 0 || !strings.Contains(out, `"dead_letters": []`) {
		t.Errorf("dead list --code attempts: %d %s; want none", code, out)
	}
	if code, out, _ := dead("list", "--code", "permanent", "--type", "digest"); code != 0 || strings.Count(out, `"seq"`) != 1 {
		t.Errorf("dead list --code permanent: %d %s; want the one letter", code, out)
	}
	if code, out, _ := dead("replay", "--all", "--code", "attempts"); code != 0 || !strings.Contains(out, `"replayed": 0`) {
		t.Errorf("dead replay --all --code attempts: %d %s; want 0 replayed", code, out)
	}
	if code, _, stderr := dead("replay", "--seq", "1", "--type", "digest"); code != 2 || !strings.Contains(stderr, "not both") {
		t.Errorf("replay with --seq and a filter: %d %s; want a usage error", code, stderr)
	}
	if code, out, _ := dead("purge", "--type", "digest", "--code", "permanent"); code != 0 || !strings.Contains(out, `"purged": 1`) {
		t.Errorf("dead purge: %d %s", code, out)
	}
	if code, _, stderr := dead("replay"); code != 2 || !strings.Contains(stderr, "--seq") {
		t.Errorf("replay without --seq: %d %s", code, stderr)
	}
}

// replayAnswer is the answer to POST /v1/dead/{seq}/replay.
type replayAnswer struct {
	Seq          uint64   `json:"replayed"`
	Subject      string   `json:"subject"`
	Deduplicated bool     `json:"deduplicated"`
	DeadAgain    []uint64 `json:"dead_again"`
}

// deadAgain is a listed dead letter with replay_of.
type deadAgain struct {
	Seq      uint64 `json:"seq"`
	ReplayOf uint64 `json:"replay_of"`
	Summary  *struct {
		Items []json.RawMessage `json:"items"`
	} `json:"summary"`
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
