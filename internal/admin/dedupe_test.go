package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
	"github.com/coalesce-io/coalesce/internal/admin"
	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testStream = "DEDUPE"

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queue is a coalesce stream on its own embedded server.
type queue struct {
	t        testing.TB
	js       jetstream.JetStream
	stream   jetstream.Stream
	subjects publisher.Subjects
}

func newQueue(t testing.TB, prefix string) *queue {
	t.Helper()
	_, js := testenv.NATS(t).Connect(t)
	ctx := testCtx(t)
	if _, err := publisher.New(ctx, js, &publisher.Config{Stream: testStream, Prefix: prefix}); err != nil {
		t.Fatalf("publisher.New: %v", err)
	}
	s, err := js.Stream(ctx, testStream)
	if err != nil {
		t.Fatal(err)
	}
	return &queue{t: t, js: js, stream: s, subjects: publisher.Subjects{Prefix: prefix}}
}

func (q *queue) opts(apply bool) admin.DedupeOptions {
	return admin.DedupeOptions{Stream: testStream, Subjects: q.subjects, Apply: apply}
}

// publish sends a raw message, as a producer that predates coalesce would,
// and returns its stream sequence.
func (q *queue) publish(subject, body string, h nats.Header) uint64 {
	q.t.Helper()
	ack, err := q.js.PublishMsg(testCtx(q.t), &nats.Msg{Subject: subject, Data: []byte(body), Header: h})
	if err != nil {
		q.t.Fatalf("publish on %s: %v", subject, err)
	}
	return ack.Sequence
}

func (q *queue) msgs() uint64 {
	q.t.Helper()
	info, err := q.stream.Info(testCtx(q.t))
	if err != nil {
		q.t.Fatal(err)
	}
	return info.State.Msgs
}

// seqs returns the sequences the stream holds on subject.
func (q *queue) seqs(subject string) []uint64 {
	q.t.Helper()
	var out []uint64
	for seq := uint64(1); ; {
		m, err := q.stream.GetMsg(testCtx(q.t), seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			q.t.Fatal(err)
		}
		out = append(out, m.Sequence)
		seq = m.Sequence + 1
	}
}

// take makes n jobs of jobType in flight: a worker's durable consumer
// fetches them and does not acknowledge them.
func (q *queue) take(filter string, n int) []jetstream.Msg {
	q.t.Helper()
	ctx := testCtx(q.t)
	cons, err := q.js.CreateOrUpdateConsumer(ctx, testStream, jetstream.ConsumerConfig{
		Durable:       "worker",
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxDeliver:    -1,
	})
	if err != nil {
		q.t.Fatal(err)
	}
	if n == 0 {
		return nil
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		q.t.Fatal(err)
	}
	var taken []jetstream.Msg
	for m := range batch.Messages() {
		taken = append(taken, m)
	}
	if err := batch.Error(); err != nil {
		q.t.Fatal(err)
	}
	return taken
}

func seqOf(t testing.TB, m jetstream.Msg) uint64 {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.Sequence.Stream
}

func fp(t testing.TB, jobType, args string, fields ...string) string {
	t.Helper()
	f, err := fingerprint.FromJSON(jobType, []byte(args), fields...)
	if err != nil {
		t.Fatal(err)
	}
	return f.String()
}

// coalesceHeaders are the headers coalesce publishes a job of key with;
// token 0 is a bypassed job.
func coalesceHeaders(t testing.TB, jobType, key string, token debounce.Token) nats.Header {
	t.Helper()
	k, err := debounce.ParseRoundKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return publisher.EncodeHeaders(debounce.Job{
		Type: jobType, Key: k, Fingerprint: fingerprint.Fingerprint(k), Token: token,
		Mode: debounce.ModeDedup, OpenedAt: time.Now(), TTL: time.Minute,
	})
}

// counts is the report without its groups, for comparisons.
type counts struct{ scanned, kept, duplicates, removed, inFlight, unreadable int }

func countsOf(r admin.DedupeReport) counts {
	return counts{r.Scanned, r.Kept, r.Duplicates, r.Removed, r.SkippedInFlight, r.SkippedUnreadable}
}

func outcomes(r admin.DedupeReport) map[uint64]admin.DedupeOutcome {
	m := map[uint64]admin.DedupeOutcome{}
	for _, g := range r.Groups {
		for _, d := range g.Duplicates {
			m[d.Seq] = d.Outcome
		}
	}
	return m
}

// TestDedupeFloodedQueue floods a queue the way producers without coalesce
// do, makes two jobs in flight, and cleans it: dry run, apply, apply again.
func TestDedupeFloodedQueue(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	q := newQueue(t, "flood.co")
	recompute := q.subjects.Job("recompute")

	// 60 jobs over 5 tenants, written 4 ways that are the same args.
	variants := []string{
		`{"tenant":%d,"period":"2026-08"}`,
		`{ "period" : "2026-08", "tenant" : %d }`,
		"{\n\t\"tenant\": %d,\n\t\"period\": \"2026-08\"\n}",
		`{"period":"2026-08","\u0074enant":%d}`,
	}
	byTenant := map[int][]uint64{}
	for i := range 60 {
		tenant := i%5 + 1
		seq := q.publish(recompute, fmt.Sprintf(variants[(i/5)%len(variants)], tenant), nil)
		byTenant[tenant] = append(byTenant[tenant], seq)
	}
	unreadable := []uint64{
		q.publish(recompute, `{"tenant":1,"tenant":1}`, nil),
		q.publish(recompute, `{"tenant":1,"tenant":1}`, nil), // identical, still never removed
		q.publish(recompute, `not json`, nil),
	}

	// A dotted job type published by coalesce: key k1 has a first round, a
	// bypassed copy, a re-publish of the same round, a second round and an
	// old headerless message whose fingerprint is k1.
	report := q.subjects.Job("report.build")
	k1, k2 := fp(t, "report.build", `{"id":7}`), fp(t, "report.build", `{"id":8}`)
	round1, round2 := debounce.Token(0x1111), debounce.Token(0x2222)
	r1 := q.publish(report, `{"id":7}`, coalesceHeaders(t, "report.build", k1, round1))
	bypassed := q.publish(report, `{"id":7}`, coalesceHeaders(t, "report.build", k1, 0))
	again := q.publish(report, `{"id":7}`, coalesceHeaders(t, "report.build", k1, round1))
	r2 := q.publish(report, `{"id":7}`, coalesceHeaders(t, "report.build", k1, round2))
	old := q.publish(report, `{ "id" : 7 }`, nil)
	other := q.publish(report, `{"id":8}`, coalesceHeaders(t, "report.build", k2, 0x3333))
	badKey := q.publish(report, `{"id":7}`, nats.Header{publisher.HeaderKey: []string{"zz"}})
	// Not job subjects: never read.
	q.publish(q.subjects.Dead("recompute"), `{"tenant":1,"period":"2026-08"}`, nil)

	taken := q.take(recompute, 2)
	if len(taken) != 2 || seqOf(t, taken[0]) != byTenant[1][0] || seqOf(t, taken[1]) != byTenant[2][0] {
		t.Fatalf("took %d jobs, want the first of tenants 1 and 2", len(taken))
	}
	inFlight := []uint64{byTenant[1][0], byTenant[2][0]}

	wantCounts := counts{scanned: 70, kept: 8, duplicates: 56, inFlight: 2, unreadable: 4}
	before := q.msgs()

	// Dry run: the right verdicts, nothing deleted.
	dry, err := admin.Dedupe(ctx, q.js, q.opts(false))
	if err != nil {
		t.Fatal(err)
	}
	if got := countsOf(dry); got != wantCounts {
		t.Fatalf("dry run counts %+v, want %+v", got, wantCounts)
	}
	if got := q.msgs(); got != before {
		t.Fatalf("dry run changed the stream: %d messages, was %d", got, before)
	}
	if len(dry.Groups) != 6 {
		t.Fatalf("%d groups, want 6 (5 tenants and key k1): %+v", len(dry.Groups), dry.Groups)
	}
	wantKept := map[string]uint64{} // key -> kept sequence
	for tenant, seqs := range byTenant {
		key := fp(t, "recompute", fmt.Sprintf(variants[0], tenant))
		// The oldest pending one: a job in flight does not cover them.
		wantKept[key] = seqs[0]
		if tenant <= 2 {
			wantKept[key] = seqs[1]
		}
	}
	wantKept[k1] = r1
	for _, g := range dry.Groups {
		if want, ok := wantKept[g.Key]; !ok || g.Kept != want {
			t.Errorf("group %s %s kept seq %d, want %d", g.Type, g.Key, g.Kept, want)
		}
		for _, d := range g.Duplicates {
			if d.Outcome != admin.OutcomeWouldRemove || d.Seq <= g.Kept || slices.Contains(inFlight, d.Seq) || slices.Contains(unreadable, d.Seq) {
				t.Errorf("group %s: duplicate %+v", g.Key, d)
			}
		}
		if g.Key == k1 {
			dups := slices.Collect(func(yield func(uint64) bool) {
				for _, d := range g.Duplicates {
					yield(d.Seq)
				}
			})
			if g.Type != "report.build" || !slices.Equal(g.KeptRounds, []uint64{r2}) || !slices.Equal(dups, []uint64{bypassed, again, old}) {
				t.Errorf("group k1: type %s, kept rounds %v, duplicates %v; want report.build, [%d], [%d %d %d]",
					g.Type, g.KeptRounds, dups, r2, bypassed, again, old)
			}
		}
	}
	var text bytes.Buffer
	dry.WriteText(&text)
	tenant3 := fp(t, "recompute", fmt.Sprintf(variants[0], 3))
	wantLine := fmt.Sprintf("would remove seq %d (type recompute, key %s…, duplicate of seq %d)\n", byTenant[3][1], tenant3[:12], byTenant[3][0])
	if !strings.Contains(text.String(), wantLine) || !strings.Contains(text.String(), "dry run, nothing removed") {
		t.Errorf("WriteText:\n%s\nwant a line %q", text.String(), wantLine)
	}
	if n := strings.Count(text.String(), "would remove seq"); n != 56 {
		t.Errorf("WriteText has %d would-remove lines, want 56", n)
	}

	// Apply: exactly the duplicates go.
	applied, err := admin.Dedupe(ctx, q.js, q.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	wantApplied := wantCounts
	wantApplied.removed = 56
	if got := countsOf(applied); got != wantApplied {
		t.Fatalf("apply counts %+v, want %+v", got, wantApplied)
	}
	for seq, o := range outcomes(applied) {
		if o != admin.OutcomeRemoved {
			t.Errorf("seq %d: %s, want removed", seq, o)
		}
	}
	if got := q.msgs(); got != before-56 {
		t.Fatalf("stream holds %d messages after apply, want %d", got, before-56)
	}
	wantRecompute := append(slices.Clone(inFlight), byTenant[1][1], byTenant[2][1], byTenant[3][0], byTenant[4][0], byTenant[5][0])
	wantRecompute = append(wantRecompute, unreadable...)
	slices.Sort(wantRecompute)
	if got := q.seqs(recompute); !slices.Equal(got, wantRecompute) {
		t.Errorf("recompute jobs left %v, want %v", got, wantRecompute)
	}
	if got, want := q.seqs(report), []uint64{r1, r2, other, badKey}; !slices.Equal(got, want) {
		t.Errorf("report.build jobs left %v, want %v", got, want)
	}
	text.Reset()
	applied.WriteText(&text)
	if n := strings.Count(text.String(), "\nremoved seq"); n != 56 || strings.Contains(text.String(), "would remove") {
		t.Errorf("applied WriteText has %d removed lines, want 56:\n%s", n, text.String())
	}

	// Again: nothing left to remove.
	again2, err := admin.Dedupe(ctx, q.js, q.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := countsOf(again2), (counts{scanned: 14, kept: 8, inFlight: 2, unreadable: 4}); got != want || len(again2.Groups) != 0 {
		t.Fatalf("second apply %+v with %d groups, want %+v and none", got, len(again2.Groups), want)
	}

	// The jobs in flight were never touched: their workers can finish them.
	for _, m := range taken {
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack seq %d: %v", seqOf(t, m), err)
		}
	}
}

// TestDedupeKeyFields groups headerless jobs by the key fields of their type.
func TestDedupeKeyFields(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	q := newQueue(t, "fields")
	subj := q.subjects.Job("recompute")
	t1 := q.publish(subj, `{"tenant":1,"period":"2026-06"}`, nil)
	t2 := q.publish(subj, `{"tenant":2,"period":"2026-06"}`, nil)
	d1 := q.publish(subj, `{"period":"2026-07","tenant":1}`, nil)
	d2 := q.publish(subj, `{"tenant":2,"period":"2026-08","extra":[1,2]}`, nil)
	d3 := q.publish(subj, `{"tenant":1}`, nil)
	noTenant := q.publish(subj, `{"period":"2026-06"}`, nil)
	// Another type, not in Types: not read even though it repeats.
	q.publish(q.subjects.Job("mail"), `{"to":"a"}`, nil)
	q.publish(q.subjects.Job("mail"), `{"to":"a"}`, nil)

	opts := q.opts(true)
	opts.Types = []string{"recompute"}
	opts.Fields = map[string][]string{"recompute": {"tenant"}}
	rep, err := admin.Dedupe(ctx, q.js, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := countsOf(rep), (counts{scanned: 6, kept: 2, duplicates: 3, removed: 3, unreadable: 1}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	wantGroups := []struct {
		key  string
		kept uint64
		dups []uint64
	}{
		{fp(t, "recompute", `{"tenant":1}`, "tenant"), t1, []uint64{d1, d3}},
		{fp(t, "recompute", `{"tenant":2}`, "tenant"), t2, []uint64{d2}},
	}
	if len(rep.Groups) != len(wantGroups) {
		t.Fatalf("groups %+v, want %d", rep.Groups, len(wantGroups))
	}
	for i, want := range wantGroups {
		g := rep.Groups[i]
		var dups []uint64
		for _, d := range g.Duplicates {
			dups = append(dups, d.Seq)
		}
		if g.Key != want.key || g.Kept != want.kept || !slices.Equal(dups, want.dups) {
			t.Errorf("group %d: key %s kept %d dups %v, want %s %d %v", i, g.Key, g.Kept, dups, want.key, want.kept, want.dups)
		}
	}
	if got, want := q.seqs(subj), []uint64{t1, t2, noTenant}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	if got := len(q.seqs(q.subjects.Job("mail"))); got != 2 {
		t.Errorf("%d mail jobs left, want 2 (not in Types)", got)
	}
}

// TestDedupeInFlightFilters checks which consumers make a job in flight.
func TestDedupeInFlightFilters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		filter     func(publisher.Subjects) string
		inFlight   int
		wantKept   uint64
		wantRemove []uint64
	}{
		{"type consumer", func(s publisher.Subjects) string { return s.Job("sync") }, 1, 2, []uint64{3, 4}},
		{"all jobs consumer", func(s publisher.Subjects) string { return s.AllJobs() }, 1, 2, []uint64{3, 4}},
		{"whole stream consumer", func(publisher.Subjects) string { return "" }, 1, 2, []uint64{3, 4}},
		{"other type consumer", func(s publisher.Subjects) string { return s.Job("sync2") }, 0, 1, []uint64{2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			q := newQueue(t, "co")
			for range 4 {
				q.publish(q.subjects.Job("sync"), `{"account":"acme"}`, nil)
			}
			q.take(tt.filter(q.subjects), tt.inFlight)
			rep, err := admin.Dedupe(ctx, q.js, q.opts(true))
			if err != nil {
				t.Fatal(err)
			}
			if rep.SkippedInFlight != tt.inFlight || len(rep.Groups) != 1 || rep.Groups[0].Kept != tt.wantKept {
				t.Fatalf("report %+v, want %d in flight and seq %d kept", rep, tt.inFlight, tt.wantKept)
			}
			left := q.seqs(q.subjects.Job("sync"))
			if got, want := len(left), 4-len(tt.wantRemove); got != want || slices.ContainsFunc(left, func(s uint64) bool { return slices.Contains(tt.wantRemove, s) }) {
				t.Errorf("left %v, want all but %v", left, tt.wantRemove)
			}
		})
	}
}

// TestDedupeWorkerStartsMeanwhile: a duplicate a worker takes between the
// scan and its removal is left alone.
func TestDedupeWorkerStartsMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	q := newQueue(t, "race")
	subj := q.subjects.Job("sync")
	for range 4 {
		q.publish(subj, `{"account":"acme"}`, nil)
	}
	q.take(subj, 0) // the worker's consumer exists but has taken nothing yet
	var taken []jetstream.Msg
	rep, err := admin.DedupeWithHook(ctx, q.js, q.opts(true), func() { taken = q.take(subj, 2) })
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 2 {
		t.Fatalf("worker took %d jobs, want 2", len(taken))
	}
	want := map[uint64]admin.DedupeOutcome{2: admin.OutcomeInFlight, 3: admin.OutcomeRemoved, 4: admin.OutcomeRemoved}
	if got := outcomes(rep); !equalMaps(got, want) || rep.Removed != 2 || rep.Duplicates != 3 {
		t.Fatalf("outcomes %v removed %d duplicates %d, want %v, 2, 3", got, rep.Removed, rep.Duplicates, want)
	}
	if got := q.seqs(subj); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("left %v, want [1 2]", got)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "left seq 2 (type sync, key ") || !strings.Contains(text.String(), "a consumer took it before removal") {
		t.Errorf("WriteText:\n%s", text.String())
	}
}

func equalMaps[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestDedupeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts admin.DedupeOptions
		want error
	}{
		{"dotted stream", admin.DedupeOptions{Stream: "A.B"}, admin.ErrInvalidOptions},
		{"wildcard prefix", admin.DedupeOptions{Subjects: publisher.Subjects{Prefix: "co.*"}}, admin.ErrInvalidOptions},
		{"empty prefix token", admin.DedupeOptions{Subjects: publisher.Subjects{Prefix: "co..x"}}, admin.ErrInvalidOptions},
		{"bad type", admin.DedupeOptions{Types: []string{"re compute"}}, admin.ErrInvalidOptions},
		{"trailing dot type", admin.DedupeOptions{Types: []string{"recompute."}}, admin.ErrInvalidOptions},
		{"fields of a bad type", admin.DedupeOptions{Fields: map[string][]string{"": {"tenant"}}}, admin.ErrInvalidOptions},
		{"fields outside types", admin.DedupeOptions{Types: []string{"a"}, Fields: map[string][]string{"b": {"tenant"}}}, admin.ErrInvalidOptions},
		{"nil jetstream", admin.DedupeOptions{}, admin.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := admin.Dedupe(context.Background(), nil, tt.opts); !errors.Is(err, tt.want) {
				t.Fatalf("Dedupe: %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("missing stream", func(t *testing.T) {
		t.Parallel()
		_, js := testenv.NATS(t).Connect(t)
		_, err := admin.Dedupe(testCtx(t), js, admin.DedupeOptions{Stream: "NOPE"})
		if !errors.Is(err, admin.ErrJetStream) || !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("Dedupe: %v, want ErrJetStream wrapping ErrStreamNotFound", err)
		}
	})
}

var subjectMatchCases = []struct {
	filter, subject string
	want            bool
}{
	{"co.jobs.a", "co.jobs.a", true},
	{"co.jobs.a", "co.jobs.ab", false},
	{"co.jobs.a", "co.jobs.a.b", false},
	{"co.jobs.a.b", "co.jobs.a", false},
	{"co.jobs.*", "co.jobs.a", true},
	{"co.jobs.*", "co.jobs.a.b", false},
	{"co.*.a", "co.jobs.a", true},
	{"co.jobs.>", "co.jobs.a.b", true},
	{"co.jobs.>", "co.jobs", false},
	{"co.jobs.>", "co.dead.a", false},
	{">", "co.jobs.a", true},
	{"*", "co", true},
	{"*", "co.jobs", false},
}

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	for _, tt := range subjectMatchCases {
		if got := admin.SubjectMatches(tt.filter, tt.subject); got != tt.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}

// FuzzSubjectMatches checks the consumer filter matching against
// nats-server's own, leaving out filter tokens such as "*x" that the
// server's helper reads as a wildcard and its sublist as a literal.
func FuzzSubjectMatches(f *testing.F) {
	for _, tt := range subjectMatchCases {
		f.Add(tt.filter, tt.subject)
	}
	f.Fuzz(func(t *testing.T, filter, subject string) {
		if !server.IsValidSubject(filter) || !server.IsValidLiteralSubject(subject) {
			t.Skip()
		}
		for tok := range strings.SplitSeq(filter, ".") {
			if len(tok) > 1 && (tok[0] == '*' || tok[0] == '>') {
				t.Skip()
			}
		}
		if got, want := admin.SubjectMatches(filter, subject), server.SubjectMatchesFilter(subject, filter); got != want {
			t.Fatalf("subjectMatches(%q, %q) = %v, nats-server says %v", filter, subject, got, want)
		}
	})
}

// TestDedupeAcrossRunAndJobSubjects: coalesce publishes on run subjects, an
// older producer on the type's job subject; one identity across both is
// read in stream order, and a duplicate is removed from whichever subject it
// is on.
func TestDedupeAcrossRunAndJobSubjects(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	q := newQueue(t, "mixed.co")
	key := fp(t, "recompute", `{"tenant":1}`)
	k, err := debounce.ParseRoundKey(key)
	if err != nil {
		t.Fatal(err)
	}
	const round = debounce.Token(0x4242)
	legacy := q.subjects.Job("recompute")
	run := q.subjects.Run("recompute", k, round)
	oldest := q.publish(legacy, `{"tenant":1}`, nil)
	roundMsg := q.publish(run, `{"tenant":1}`, coalesceHeaders(t, "recompute", key, round))
	legacyDup := q.publish(legacy, `{ "tenant" : 1 }`, nil)
	roundDup := q.publish(run, `{"tenant":1}`, coalesceHeaders(t, "recompute", key, round))
	rep, err := admin.Dedupe(ctx, q.js, q.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := countsOf(rep), (counts{scanned: 4, kept: 2, duplicates: 2, removed: 2}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Kept != oldest || !slices.Equal(rep.Groups[0].KeptRounds, []uint64{roundMsg}) {
		t.Fatalf("groups %+v: want seq %d kept and round %d kept beside it", rep.Groups, oldest, roundMsg)
	}
	if got := q.seqs(legacy); !slices.Equal(got, []uint64{oldest}) {
		t.Errorf("job subject keeps %v, want [%d] (%d removed)", got, oldest, legacyDup)
	}
	if got := q.seqs(run); !slices.Equal(got, []uint64{roundMsg}) {
		t.Errorf("run subject keeps %v, want [%d] (%d removed)", got, roundMsg, roundDup)
	}
}

// TestDedupeKeepsABypassedJobsData: a job published without a round during
// a Redis outage (fail: open) carries its own event's args; for payload
// accumulate or last they are data the round's job does not have (an item,
// the latest args). It is a duplicate only of a kept job with the same args;
// matched by key alone it was deleted, and its item lost.
func TestDedupeKeepsABypassedJobsData(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, payload := range []debounce.Payload{debounce.PayloadAccumulate, debounce.PayloadLast} {
		t.Run(string(payload), func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, "byp.co")
			key := fp(t, "sync", `{"tenant":1}`, "tenant")
			k, err := debounce.ParseRoundKey(key)
			if err != nil {
				t.Fatal(err)
			}
			headers := func(token debounce.Token) nats.Header {
				return publisher.EncodeHeaders(debounce.Job{Type: "sync", Key: k, Fingerprint: fingerprint.Fingerprint(k), Token: token,
					Mode: debounce.ModeDebounce, Payload: payload, OpenedAt: time.Now(), TTL: time.Minute})
			}
			const round = debounce.Token(0x5151)
			roundMsg := q.publish(q.subjects.Run("sync", k, round), `{"tenant":1,"id":7}`, headers(round))
			// A bypassed job's run subject ends in a random "_<16 hex>" id.
			bypass := func(id string) string {
				return strings.TrimSuffix(q.subjects.Run("sync", k, 1), "0000000000000001") + id
			}
			bypassOther := q.publish(bypass("_00000000000000b1"), `{"tenant":1,"id":8}`, headers(0))
			bypassSame := q.publish(bypass("_00000000000000b2"), `{ "id":7, "tenant":1 }`, headers(0))
			rep, err := admin.Dedupe(ctx, q.js, q.opts(true))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := countsOf(rep), (counts{scanned: 3, kept: 2, duplicates: 1, removed: 1}); got != want {
				t.Errorf("counts %+v, want %+v", got, want)
			}
			left := q.seqs(q.subjects.AllRuns())
			if !slices.Contains(left, roundMsg) || !slices.Contains(left, bypassOther) || slices.Contains(left, bypassSame) {
				t.Errorf("left %v: want the round %d and the bypassed job with other args %d, not the copy %d", left, roundMsg, bypassOther, bypassSame)
			}
		})
	}
}
