package jsread

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestLost(t *testing.T) {
	for _, c := range []struct {
		err  error
		lost bool
	}{
		{jetstream.ErrMsgIteratorClosed, true},
		{fmt.Errorf("%w: %w", jetstream.ErrMsgIteratorClosed, jetstream.ErrConnectionClosed), true},
		{jetstream.ErrConsumerDeleted, true},
		{jetstream.ErrNoHeartbeat, true},
		{nats.ErrTimeout, false},
		{jetstream.ErrConsumerLeadershipChanged, false},
		{errors.New("some other trouble"), false},
	} {
		if got := Lost(c.err); got != c.lost {
			t.Errorf("Lost(%v) = %v, want %v", c.err, got, c.lost)
		}
	}
}

// The options must be accepted by nats.go (PullHeartbeat refuses values
// outside 500ms-30s when the iterator opens).
func TestOptionsAreValid(t *testing.T) {
	if Heartbeat < 500e6 || Heartbeat > 30e9 {
		t.Fatalf("Heartbeat %v outside nats.go's 500ms-30s", Heartbeat)
	}
	if n := len(Options(0)); n != 3 {
		t.Fatalf("Options: %d options", n)
	}
}
