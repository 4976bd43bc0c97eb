package publisher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A round due in a second is published as a message schedule; the server
// fires it on the job subject, where a worker decodes the job.
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An embedded JetStream server on a free loopback port.
	dir, _ := os.MkdirTemp("", "coalesce-example-")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	srv.Start()
	defer srv.Shutdown()
	srv.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)

	p, err := publisher.New(ctx, js, nil) // stream COALESCE on co.sched.>, co.run.>, co.jobs.>, co.dead.>
	if err != nil {
		fmt.Println(err)
		return
	}

	args := json.RawMessage(`{"tenant_id":42}`)
	fp, _ := fingerprint.FromJSON("recompute_financials", args)
	job := debounce.Job{
		Type: "recompute_financials", Key: debounce.RoundKey(fp), Fingerprint: fp, Token: 0x2a,
		Mode: debounce.ModeDebounce, Payload: debounce.PayloadFirst, Args: args,
		OpenedAt: time.Now(), DueAt: time.Now().Add(time.Second), TTL: time.Minute,
	}
	if err := p.Publish(ctx, job); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("scheduled on", p.Subjects().Schedule(job.Type, job.Key, job.Token))

	// The worker's side: consume the job's run subjects.
	cons, _ := js.CreateOrUpdateConsumer(ctx, p.Stream(), jetstream.ConsumerConfig{
		Durable: "worker", FilterSubject: p.Subjects().Runs(job.Type), AckPolicy: jetstream.AckExplicitPolicy,
	})
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = msg.Ack()
	got, err := publisher.DecodeJob(msg.Headers(), msg.Data())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("fired on", msg.Subject())
	fmt.Println("round", got.Token, "version", got.Version, "args", string(got.Args))
	fmt.Println("not before due:", !time.Now().Before(got.DueAt))
	// Output:
	// scheduled on co.sched.recompute_financials.3c1cff38a1124412806965534e6afe28b1aba8bea42329231848d06d1b57a68b.000000000000002a
	// fired on co.run.recompute_financials.3c1cff38a1124412806965534e6afe28b1aba8bea42329231848d06d1b57a68b.000000000000002a
	// round 000000000000002a version 0 args {"tenant_id":42}
	// not before due: true
}
