package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/publisher"
)

// Parking keeps one job type's trouble from holding up the others.
//
// A stored event that cannot be decided yet — Redis or NATS unavailable, its
// type's policy not deployed yet — cannot stay pending on the intake's
// consumer: the events waiting there count against its MaxAckPending, and
// once that many wait, nothing more is delivered, of any type. So it is
// parked: copied to the parking stream (<intake stream>_PARKED) under
// <prefix>.ingest-parked.t.<type> for a configured type,
// <prefix>.ingest-parked.other.<type> for any other, and acked on the intake
// once the copy is stored. Each configured type has a consumer of its own on
// the parking stream (the others share one), where its events wait out the
// trouble with the same backoff, without a delivery cap; a type's waiting
// events count against its own consumer only.
//
// A parked copy carries where and when the event was stored and its
// deliveries so far, so it keeps the event's decided mark (a redelivery is
// never decided twice: each copy claims the decision, ingest.go's claim), its policy grace and its dead-letter subject. It is
// stored with a message id derived from the event: an ack of the original
// that was lost parks it again, deduplicated within the stream's duplicate
// window; if by then the event was decided from the intake, the copy finds
// the decided mark and is acked.
const (
	hdrParkedPrefix     = "Coalesce-Parked-"
	hdrParkedSubject    = "Coalesce-Parked-Subject"
	hdrParkedID         = "Coalesce-Parked-Id"
	hdrParkedStored     = "Coalesce-Parked-Stored"
	hdrParkedDeliveries = "Coalesce-Parked-Deliveries"
	// parkPrefetch is what each parking consumer's iterator holds at once.
	parkPrefetch = 16
)

// ParkStream names the parking stream of an intake stream.
func ParkStream(intake string) string { return intake + "_PARKED" }

func (in *Ingest) parkPrefix() string { return in.cfg.Prefix + ".ingest-parked." }

// parkSubject is where an event of jobType is parked.
func (in *Ingest) parkSubject(jobType string) string {
	if _, ok := in.cfg.Coalescer.Policy(jobType); ok {
		return in.parkPrefix() + "t." + jobType
	}
	return in.parkPrefix() + "other." + jobType
}

// parkConsumer names the parking consumer of a configured type (consumer
// names cannot hold every character a type may).
func parkConsumer(jobType string) string {
	sum := sha256.Sum256([]byte(jobType))
	return "coalesce-parked-" + hex.EncodeToString(sum[:8])
}

// startParking provisions the parking stream and reads its consumers: one
// per configured type, one for the others, and any an earlier configuration
// left (a type since removed still has events to decide or dead-letter).
func (in *Ingest) startParking(ctx context.Context) error {
	name := ParkStream(in.cfg.Stream)
	s, err := publisher.Provision(ctx, in.cfg.JetStream, jetstream.StreamConfig{
		Name: name, Subjects: []string{in.parkPrefix() + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: in.cfg.Storage, Replicas: max(1, in.cfg.Replicas),
		Description: "coalesce durable intake: stored events waiting out an outage, one consumer per job type",
	})
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	readers := map[string]*reader{}
	add := func(consumer, filter string) {
		readers[consumer] = &reader{name: consumer, stream: name, filter: filter, prefetch: parkPrefetch, parked: true}
	}
	for _, p := range in.cfg.Coalescer.Policies() {
		add(parkConsumer(p.Type), in.parkPrefix()+"t."+p.Type)
	}
	add("coalesce-parked-other", in.parkPrefix()+"other.>")
	names := s.ConsumerNames(ctx)
	for n := range names.Name() {
		if readers[n] != nil || !strings.HasPrefix(n, "coalesce-parked-") {
			continue
		}
		c, err := s.Consumer(ctx, n)
		if err != nil {
			return fmt.Errorf("ingest: parking consumer %s: %w", n, err)
		}
		add(n, c.CachedInfo().Config.FilterSubject)
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("ingest: parking consumers on %s: %w", name, err)
	}
	keys := make([]string, 0, len(readers))
	for k := range readers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := in.startReader(ctx, readers[k]); err != nil {
			return err
		}
	}
	return nil
}

// park stores a copy of a stored event on the parking stream, then acks
// the original.
func (in *Ingest) park(ctx context.Context, msg jetstream.Msg, ev storedEvent) error {
	if ev.id == "" {
		return fmt.Errorf("its metadata could not be read")
	}
	m := nats.NewMsg(in.parkSubject(in.typeFromSubject(ev.subject, "ingest")))
	copyHeaders(m.Header, msg.Headers())
	m.Header.Set(hdrParkedSubject, ev.subject)
	m.Header.Set(hdrParkedID, ev.id)
	m.Header.Set(hdrParkedStored, ev.stored.UTC().Format(time.RFC3339Nano))
	m.Header.Set(hdrParkedDeliveries, strconv.Itoa(ev.n))
	m.Header.Set(jetstream.MsgIDHeader, "parked:"+ev.id)
	m.Data = msg.Data()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := in.cfg.JetStream.PublishMsg(pctx, m); err != nil {
		return err
	}
	if err := msg.DoubleAck(pctx); err != nil {
		// It comes back after AckWait and is parked again (deduplicated)
		// or decided; never lost.
		in.log.Warn("ingest: a parked event's ack on the intake was not confirmed; it will be delivered there again", "subject", ev.subject, "err", err)
	}
	return nil
}
