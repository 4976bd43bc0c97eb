package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/coalesce-io/coalesce/worker"
)

// killedProducerPolicies are the producer's policies in both processes,
// whose rounds are held in Redis until due (schedules: redis; auto does so
// on a Redis with an append-only file).
var killedProducerPolicies = []debounce.Policy{
	{Type: "last", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadLast, KeyFields: []string{"t"}},
	{Type: "acc", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "i", KeyFields: []string{"t"}},
	{Type: "first", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"t"}},
}

// TestProducerKilledAfterTheWrite: a producer process opens rounds (one
// Redis write each, nothing published) and is SIGKILLed the moment its
// last Submit returns, its own forwarder with it. The crash window of rounds
// held in Redis: the write is all there is, so a worker in another process
// forwards and runs every round when due, each with its payload (the last
// args, every item, the first args).
func TestProducerKilledAfterTheWrite(t *testing.T) {
	if os.Getenv("COALESCE_KILLED_PRODUCER") != "" {
		killedProducer(t)
		return
	}
	t.Parallel()
	srv := testenv.NATS(t)
	rdb := testenv.SharedRedis(t).Client(t)
	s := newStackWith(t, srv, rdb, func(c *debounce.Config) { c.Schedules = debounce.SchedulesRedis }, killedProducerPolicies...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestProducerKilledAfterTheWrite$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COALESCE_KILLED_PRODUCER=1", "COALESCE_KP_REDIS="+rdb.Options().Addr,
		"COALESCE_KP_NATS="+srv.URL, "COALESCE_KP_PREFIX="+s.prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	decided := map[string]debounce.Decision{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "decided ")
		if !ok {
			continue
		}
		var d debounce.Decision
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("producer said %q: %v", line, err)
		}
		decided[d.Type] = d
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the producer was not killed: %v", err)
	}
	if len(decided) != 3 {
		t.Fatalf("the producer decided %v before it died, want the three types' last events", decided)
	}
	if n, _ := s.pub.Pending(context.Background(), debounce.Job{Type: "last", Key: decided["last"].Key, Token: decided["last"].Round}); n {
		t.Fatal("the killed producer had published its round: no crash window tested")
	}

	var got started
	s.run(t, got.handler, worker.Config{Types: []string{"last", "acc", "first"}})
	waitFor(t, 60*time.Second, "the killed producer's three rounds", func() bool { j, _ := got.snapshot(); return len(j) >= 3 })
	jobs, _ := got.snapshot()
	for _, j := range jobs {
		d := decided[j.Type]
		if j.Token != d.Round || j.Summary.Events != 3 {
			t.Errorf("%s: ran round %s with %d events, want the producer's round %s with 3", j.Type, j.Token, j.Summary.Events, d.Round)
		}
		var items []string
		for _, it := range j.Summary.Items {
			items = append(items, string(it))
		}
		slices.Sort(items)
		switch {
		case j.Type == "last" && string(j.Summary.Payload) != `{"t":1,"i":2}`:
			t.Errorf("last: payload %s, want the last event's args", j.Summary.Payload)
		case j.Type == "acc" && strings.Join(items, " ") != "0 1 2":
			t.Errorf("acc: items %v, want 0 1 2", items)
		case string(j.Args) != `{"t":1,"i":0}`:
			t.Errorf("%s: args %s, want the first event's", j.Type, j.Args)
		}
	}
}

// killedProducer is the producer process of TestProducerKilledAfterTheWrite:
// it decides three events per type, says so, and kills itself.
func killedProducer(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("COALESCE_KP_REDIS"), DisableIdentity: true, MaxRetries: -1})
	nc, err := nats.Connect(os.Getenv("COALESCE_KP_NATS"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Policies: killedProducerPolicies, Prefix: os.Getenv("COALESCE_KP_PREFIX"),
		Schedules: debounce.SchedulesRedis})
	if err != nil {
		t.Fatal(err)
	}
	var last []string
	for i := range 3 {
		for _, p := range killedProducerPolicies {
			d, err := co.Submit(ctx, debounce.Event{Type: p.Type, Args: json.RawMessage(fmt.Sprintf(`{"t":1,"i":%d}`, i))})
			if err != nil {
				t.Fatal(err)
			}
			if i == 2 {
				b, _ := json.Marshal(d)
				last = append(last, "decided "+string(b))
			}
		}
	}
	// The local joins of "first" are flushed (a kill loses their counts,
	// not their coverage: README, local joins); the rest is one write each.
	if err := co.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println(strings.Join(last, "\n"))
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
