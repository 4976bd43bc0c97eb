package testenv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSServers starts each kind of server, stores a message in a file
// stream, restarts the server and reads the message back: same port, same
// store.
func TestNATSServers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		start       func(testing.TB) *testenv.NATSServer
		wantVersion string // prefix
	}{
		{"embedded", testenv.NATS, server.VERSION},
		{"process", testenv.NATSProcess, server.VERSION},
		{"debian", testenv.OldNATSProcess, "2.9."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := tt.start(t)
			if !strings.HasPrefix(srv.Version, tt.wantVersion) {
				t.Fatalf("version %q, want %s...", srv.Version, tt.wantVersion)
			}
			nc, js := srv.Connect(t)
			if got := nc.ConnectedServerVersion(); got != srv.Version {
				t.Fatalf("connected to %s, server says %s", got, srv.Version)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, "t.a", []byte("kept")); err != nil {
				t.Fatal(err)
			}
			url := srv.URL
			srv.Restart(t)
			if srv.URL != url {
				t.Fatalf("restarted on %s, was %s", srv.URL, url)
			}
			var msg *jetstream.RawStreamMsg
			for { // the client reconnects on its own
				// Each try gets its own deadline: a request whose reply was
				// lost to the restart would otherwise wait out the whole 20 s.
				try, cancelTry := context.WithTimeout(ctx, 2*time.Second)
				s, err := js.Stream(try, "T")
				if err == nil {
					msg, err = s.GetLastMsgForSubject(try, "t.a")
				}
				cancelTry()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("stream after restart: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if string(msg.Data) != "kept" {
				t.Fatalf("message after restart %q", msg.Data)
			}
		})
	}
}

// TestNATSStopped checks Stop really stops the server.
func TestNATSStopped(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc, js := srv.Connect(t)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err == nil {
		t.Fatal("JetStream answered after Stop")
	} else if !errors.Is(err, context.DeadlineExceeded) && nc.IsConnected() {
		t.Fatalf("unexpected error with a live connection: %v", err)
	}
}
