package daemon_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestNATSPermissionsGuardTheWorkerProtocol: HTTP tokens do not guard the
// NATS subjects of the worker protocol (anyone who may publish on
// co.worker.finish can finish a job); NATS's own authorisation does. With
// the users docs/worker-protocol.md ("Securing the NATS subjects")
// describes, a producer's credentials cannot reach co.worker.*, a
// worker's can, and the daemon answers.
func TestNATSPermissionsGuardTheWorkerProtocol(t *testing.T) {
	t.Parallel()
	allow := func(subjects ...string) *server.SubjectPermission { return &server.SubjectPermission{Allow: subjects} }
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Users: []*server.User{
		{Username: "coalesce", Password: "daemon-pw"}, // the daemon: everything under its prefix
		{Username: "producer", Password: "producer-pw", Permissions: &server.Permissions{
			Publish: allow("co.events.>", "co.ingest.>", "$JS.API.STREAM.INFO.>"), Subscribe: allow("_INBOX.>")}},
		{Username: "worker", Password: "worker-pw", Permissions: &server.Permissions{
			Publish: allow("co.worker.>", "co.dead.>", "$JS.API.CONSUMER.>", "$JS.ACK.>"), Subscribe: allow("_INBOX.>")}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func(user, pw string, errs chan error) *nats.Conn {
		t.Helper()
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pw), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errs != nil {
				errs <- err
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	co, err := debounce.New(debounce.Config{Redis: testenv.SharedRedis(t).Client(t), Prefix: testenv.Prefix(t),
		Policies: []debounce.Policy{{Type: "sync", Mode: debounce.ModeDedup}}})
	if err != nil {
		t.Fatal(err)
	}
	proto := daemon.NewProtocol(daemon.ProtocolConfig{Coalescer: co})
	daemonConn := connect("coalesce", "daemon-pw", nil)
	if err := proto.Subscribe(daemonConn, "co"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proto.Stop)
	// The subscriptions must reach the server before a worker's request
	// does, or the request finds no responders (seen once under load).
	if err := daemonConn.Flush(); err != nil {
		t.Fatal(err)
	}

	// A worker's credentials: start answers (here: the message is no job).
	msg := nats.NewMsg(daemon.StartSubject("co"))
	msg.Data = []byte(`{}`)
	reply, err := connect("worker", "worker-pw", nil).RequestMsg(msg, 5*time.Second)
	if err != nil || !strings.Contains(string(reply.Data), "invalid_job") {
		t.Fatalf("a worker's start: %v %v, want the daemon's answer", reply, err)
	}
	// A producer's credentials: refused by the server, never answered.
	errs := make(chan error, 4)
	producer := connect("producer", "producer-pw", errs)
	msg = nats.NewMsg(daemon.FinishSubject("co"))
	msg.Header.Set(daemon.HeaderResult, "ok")
	if _, err := producer.RequestMsg(msg, time.Second); err == nil {
		t.Fatal("a producer's finish was answered")
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Errorf("the producer's error: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("no permissions violation reported to the producer")
	}
}
