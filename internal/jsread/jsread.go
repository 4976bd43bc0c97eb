// Package jsread holds what coalesce's JetStream readers (the worker's job
// readers and the daemon's durable intake) agree on about a pull iterator:
// how it is opened and when it is given up and opened again.
//
// A pull iterator whose consumer vanishes while no pull request is parked
// on the server (deleted by an operator, lost with a stream leader) hears
// nothing: no "consumer deleted" status arrives, and by default nats.go
// re-issues its pull requests to a consumer that no longer exists, silently
// and forever. The iterators opened with Options report missed heartbeats
// instead, and Lost tells the reader to stop the iterator and open another,
// which creates the consumer again.
package jsread

import (
	"errors"

	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Heartbeat is the idle heartbeat asked of the server: a reader notices a
// consumer gone within two of them.
const Heartbeat = 2 * time.Second

// Options are the Messages options of every coalesce reader: prefetch at
// most prefetch messages, heartbeats every Heartbeat, missed heartbeats
// reported to Next.
func Options(prefetch int) []jetstream.PullMessagesOpt {
	return []jetstream.PullMessagesOpt{
		jetstream.PullMaxMessages(max(1, prefetch)),
		jetstream.PullHeartbeat(Heartbeat),
		jetstream.WithMessagesErrOnMissingHeartbeat(true),
	}
}

// Lost reports whether an error from Next means the iterator delivers
// nothing more: it closed, its consumer was deleted, or the server stopped
// sending heartbeats while connected. The reader stops it (Stop is
// idempotent) and opens a new one. Any other error is transient: read on.
func Lost(err error) bool {
	return errors.Is(err, jetstream.ErrMsgIteratorClosed) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrNoHeartbeat)
}
