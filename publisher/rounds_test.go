package publisher_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
)

// TestRoundsPagesOneTypesMessages: Rounds lists the schedules and jobs of
// one type in stream order, page by page with its cursor, skipping other
// types (one whose name extends this one's with dots too), bypassed jobs
// and dead letters; a cancelled round's message is gone from the listing.
func TestRoundsPagesOneTypesMessages(t *testing.T) {
	t.Parallel()
	p, _ := newPublisher(t, nil)
	ctx := testCtx(t)
	var want []debounce.Job
	for i := range 7 {
		due := time.Now().Add(time.Hour)
		if i%3 == 0 {
			due = time.Time{} // a job at once
		}
		j := testJob(t, "digest", due)
		if err := p.Publish(ctx, j); err != nil {
			t.Fatal(err)
		}
		want = append(want, j)
		other := testJob(t, "digest.x.y", time.Now().Add(time.Hour)) // sched.digest.x.y.<key>.<round>
		if err := p.Publish(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	bypassed := testJob(t, "digest", time.Time{})
	bypassed.Token = 0
	if err := p.Publish(ctx, bypassed); err != nil {
		t.Fatal(err)
	}
	var got []publisher.RoundMessage
	after := uint64(0)
	for pages := 0; ; pages++ {
		page, next, err := p.Rounds(ctx, "digest", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if pages > 5 {
			t.Fatal("more pages than rounds")
		}
		got = append(got, page...)
		if next == 0 {
			break
		}
		after = next
	}
	if len(got) != len(want) {
		t.Fatalf("%d rounds listed, want %d: %+v", len(got), len(want), got)
	}
	for i, rm := range got {
		w := want[i]
		if rm.Err != nil || rm.Job.Token != w.Token || rm.Key != w.Key || rm.Job.Fingerprint != w.Fingerprint || string(rm.Args) != string(w.Args) {
			t.Errorf("round %d: %+v, want %+v", i, rm, w)
		}
		if rm.Scheduled != !w.DueAt.IsZero() || rm.Scheduled && !rm.Due.Equal(w.DueAt) {
			t.Errorf("round %d: scheduled %v due %v, want due %v", i, rm.Scheduled, rm.Due, w.DueAt)
		}
		if i > 0 && rm.Seq <= got[i-1].Seq {
			t.Errorf("round %d: sequence %d after %d", i, rm.Seq, got[i-1].Seq)
		}
	}
	if _, err := p.Cancel(ctx, "digest", want[1].Key, want[1].Token); err != nil {
		t.Fatal(err)
	}
	page, _, err := p.Rounds(ctx, "digest", 0, 100)
	if err != nil || len(page) != len(want)-1 || page[1].Job.Token != want[2].Token {
		t.Errorf("after a cancel: %d rounds (%v), want %d without the cancelled one", len(page), err, len(want)-1)
	}
	if _, _, err := p.Rounds(ctx, "bad type!", 0, 1); err == nil {
		t.Error("a bad type is listed")
	}
}

// BenchmarkRoundsFirstPage: the first page of 50 rounds of a type with
// COALESCE_BENCH_ROUNDS (default 200,000) pending schedules, beside as many
// of another type interleaved with them.
func BenchmarkRoundsFirstPage(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("COALESCE_BENCH_ROUNDS")); err == nil && v > 0 {
		n = v
	}
	p, js := newPublisher(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	due := time.Now().Add(24 * time.Hour)
	for i := 0; i < n; i += 1000 {
		var jobs []debounce.Job
		for range min(1000, n-i) {
			jobs = append(jobs, testJob(b, "big", due), testJob(b, "other", due))
		}
		for _, err := range p.PublishBatch(ctx, jobs) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	s, _ := js.Stream(ctx, p.Stream())
	info, _ := s.Info(ctx)
	b.Logf("%d + %d schedules stored in %v (stream: %d messages)", n, n, time.Since(start).Round(time.Millisecond), info.State.Msgs)
	var after uint64
	b.ResetTimer()
	for b.Loop() {
		page, next, err := p.Rounds(ctx, "big", 0, 50)
		if err != nil || len(page) != 50 {
			b.Fatalf("%d rounds, %v", len(page), err)
		}
		after = next
	}
	b.StopTimer()
	// A page from the middle: the cursor is a sequence, not an offset.
	mid := time.Now()
	page, _, err := p.Rounds(ctx, "big", info.State.LastSeq/2, 50)
	if err != nil || len(page) != 50 {
		b.Fatalf("%d rounds, %v", len(page), err)
	}
	b.Logf("a page from the middle: %v; after the first page: %d", time.Since(mid), after)
}
