package admin

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// DedupeWithHook is Dedupe running afterScan between the scan and the
// deletions.
func DedupeWithHook(ctx context.Context, js jetstream.JetStream, opts DedupeOptions, afterScan func()) (DedupeReport, error) {
	return dedupe(ctx, js, opts, afterScan)
}

var SubjectMatches = subjectMatches
