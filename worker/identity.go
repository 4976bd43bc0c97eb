package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
)

// A job's identity (debounce.Job.ID) is "<key>.<token>" for a round's job
// and "<key>.<bypass>" for a bypassed one, whose message carries its
// Bypass in the Coalesce-Bypass header. A bypassed job published before
// that header existed gets one here, stable for every delivery of its
// message: the last token of its run subject (the publisher has always
// named a bypassed job's subject so), else its place in its stream, else
// its content (ContentBypass).

// fillBypass sets job.Bypass for a bypassed job that came without one.
func fillBypass(job *debounce.Job, msg jetstream.Msg) {
	if job.Token != 0 || job.Bypass != "" {
		return
	}
	if i := strings.LastIndexByte(msg.Subject(), '.'); i >= 0 && debounce.ValidBypass(msg.Subject()[i+1:]) {
		job.Bypass = msg.Subject()[i+1:]
		return
	}
	if md, err := msg.Metadata(); err == nil {
		job.Bypass = digestBypass(md.Stream + "\n" + strconv.FormatUint(md.Sequence.Stream, 10))
		return
	}
	job.Bypass = ContentBypass(*job)
}

// ContentBypass is the Bypass of a bypassed job known only by its content
// (a message published before Coalesce-Bypass existed, forwarded through
// the worker protocol without its subject): a digest of its type, key,
// fingerprint, opening time and args. Two such jobs differ unless every
// one of those is equal (the same event bypassed twice in a millisecond).
func ContentBypass(job debounce.Job) string {
	return digestBypass(job.Type + "\n" + job.Key.String() + "\n" + job.Fingerprint.String() + "\n" +
		strconv.FormatInt(job.OpenedAt.UnixMilli(), 10) + "\n" + string(job.Args))
}

func digestBypass(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "_" + hex.EncodeToString(sum[:8])
}
