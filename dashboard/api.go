package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
)

// OutboxState is the Postgres outbox's backlog.
type OutboxState struct {
	BacklogRows   int64   `json:"backlog_rows"`
	OldestSeconds float64 `json:"oldest_row_seconds"`
}

// Overview is GET /v1/overview.
type Overview struct {
	Now         time.Time         `json:"now"`
	SampleEvery string            `json:"sample_every"`
	Totals      TypeOverview      `json:"totals"`
	Types       []TypeOverview    `json:"types"`
	DeadLetters int               `json:"dead_letters"`
	LocalJoins  *LocalJoins       `json:"local_joins,omitempty"` // when on
	Outbox      *OutboxState      `json:"outbox,omitempty"`      // when a relay runs
	Errors      map[string]string `json:"errors,omitempty"`      // parts that could not be read
}

// TypeOverview is one job type's line of the overview (Totals: every type).
type TypeOverview struct {
	Type         string  `json:"type,omitempty"`
	Events       float64 `json:"events"`         // decided since the daemon started
	Jobs         float64 `json:"jobs"`           // published for them
	Saved        float64 `json:"jobs_saved"`     // events - jobs
	EventsPerJob float64 `json:"events_per_job"` // 0 before the first job
	// Pending counts the type's messages in the stream (schedules, and jobs
	// not yet done), up to PendingCap; PendingMore when there are more.
	Pending     int           `json:"pending"`
	PendingMore bool          `json:"pending_more,omitempty"`
	Overdue     *OverdueRound `json:"oldest_overdue,omitempty"`
	DeadLetters int           `json:"dead_letters"`
	Series      *Series       `json:"series,omitempty"`
}

// OverdueRound is the type's oldest round past its due time whose job no
// worker has taken.
type OverdueRound struct {
	Key       debounce.RoundKey `json:"key"`
	Round     debounce.Token    `json:"round"`
	DueAt     time.Time         `json:"due_at"`
	OverdueBy string            `json:"overdue_by"`
	Seconds   float64           `json:"overdue_seconds"`
}

// LocalJoins are the local-join counters (debounce.LocalStats).
type LocalJoins struct {
	Joined      uint64 `json:"joined"`
	Flushes     uint64 `json:"flushes"`
	Resubmitted uint64 `json:"resubmitted"`
	FlushErrors uint64 `json:"flush_errors"`
	Rounds      int    `json:"rounds"` // remembered now: the rounds whose joins wait for a flush or may come
}

// PendingCap bounds the messages the overview counts per type.
const PendingCap = 1000

// pendingCacheFor: a type's pending count is counted again after this.
const pendingCacheFor = 15 * time.Second

type pendingCount struct {
	n    int
	more bool
	at   time.Time
}

type pendingCache struct {
	mu sync.Mutex
	m  map[string]pendingCount
}

// pending counts a type's round messages, up to PendingCap (cached).
func (d *Dashboard) pending(ctx context.Context, jobType string, now time.Time) (int, bool, error) {
	d.pend.mu.Lock()
	c, ok := d.pend.m[jobType]
	d.pend.mu.Unlock()
	if ok && now.Sub(c.at) < pendingCacheFor {
		return c.n, c.more, nil
	}
	// Rounds held in Redis until due (debounce.SchedulesRedis) have no
	// message yet: their due list counts them.
	held, err := d.cfg.Coalescer.DueCount(ctx, jobType)
	if err != nil {
		return 0, false, err
	}
	n, after := int(min(held, PendingCap+1)), uint64(0)
	for n < PendingCap {
		page, next, err := d.cfg.Publisher.Rounds(ctx, jobType, after, min(publisher.MaxRoundsPage, PendingCap-n+1))
		if err != nil {
			return 0, false, err
		}
		n += len(page)
		if next == 0 {
			break
		}
		after = next
	}
	c = pendingCount{n: min(n, PendingCap), more: n > PendingCap, at: now}
	d.pend.mu.Lock()
	d.pend.m[jobType] = c
	d.pend.mu.Unlock()
	return c.n, c.more, nil
}

// overdueLook bounds the jobs looked at for the oldest overdue one.
const overdueLook = 20

// oldestOverdue finds the type's oldest job not taken past its due time.
func (d *Dashboard) oldestOverdue(ctx context.Context, jobType string, now time.Time) (*OverdueRound, error) {
	jobs, _, err := d.cfg.Publisher.Jobs(ctx, jobType, 0, overdueLook)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	keys := make([]debounce.RoundKey, len(jobs))
	for i, j := range jobs {
		keys[i] = j.Key
	}
	rounds, found, err := d.cfg.Coalescer.InspectMany(ctx, jobType, keys)
	if err != nil {
		return nil, err
	}
	for i, j := range jobs {
		due := j.Job.DueAt
		if due.IsZero() {
			due = j.Job.OpenedAt
		}
		if !found[i] || rounds[i].Token != j.Job.Token || !now.After(due.Add(time.Second)) {
			continue // taken (running), or not due yet
		}
		by := now.Sub(due)
		return &OverdueRound{Key: j.Key, Round: j.Job.Token, DueAt: due, OverdueBy: by.Round(time.Second).String(), Seconds: by.Seconds()}, nil
	}
	return nil, nil
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) error {
	ctx, now := r.Context(), time.Now()
	ov := Overview{Now: now.UTC(), SampleEvery: d.cfg.SampleEvery.String(), Errors: map[string]string{}}
	var counts Counters
	if d.cfg.Counters != nil {
		counts = d.cfg.Counters()
	}
	all := series(d.stats.all())
	dead, err := d.dead.CountByType(ctx)
	if err != nil {
		ov.Errors["dead_letters"] = err.Error()
	}
	for _, typ := range sortedTypes(d.cfg.Coalescer.Policies(), counts) {
		c := counts[typ]
		t := TypeOverview{Type: typ, Events: c.Events, Jobs: c.Jobs, Saved: max(c.Events-c.Jobs, 0), DeadLetters: dead[typ], Series: all[typ]}
		if c.Jobs > 0 {
			t.EventsPerJob = round3(c.Events / c.Jobs)
		}
		if _, ok := d.cfg.Coalescer.Policy(typ); ok {
			if t.Pending, t.PendingMore, err = d.pending(ctx, typ, now); err != nil {
				ov.Errors["pending."+typ] = err.Error()
			}
			if t.Overdue, err = d.oldestOverdue(ctx, typ, now); err != nil {
				ov.Errors["oldest_overdue."+typ] = err.Error()
			}
		}
		ov.Totals.Events += t.Events
		ov.Totals.Jobs += t.Jobs
		ov.Totals.Saved += t.Saved
		ov.Totals.Pending += t.Pending
		ov.Totals.PendingMore = ov.Totals.PendingMore || t.PendingMore
		ov.Types = append(ov.Types, t)
	}
	for _, n := range dead {
		ov.DeadLetters += n
	}
	ov.Totals.DeadLetters = ov.DeadLetters
	if ov.Totals.Jobs > 0 {
		ov.Totals.EventsPerJob = round3(ov.Totals.Events / ov.Totals.Jobs)
	}
	if ls := d.cfg.Coalescer.LocalStats(); ls.Joined > 0 || ls.Flushes > 0 || ls.Rounds > 0 {
		ov.LocalJoins = &LocalJoins{Joined: ls.Joined, Flushes: ls.Flushes, Resubmitted: ls.Resubmitted, FlushErrors: ls.FlushErrors, Rounds: ls.Rounds}
	}
	if d.cfg.Outbox != nil {
		if st, err := d.cfg.Outbox(ctx); err != nil {
			ov.Errors["outbox"] = err.Error()
		} else {
			ov.Outbox = &st
		}
	}
	if len(ov.Errors) == 0 {
		ov.Errors = nil
	}
	writeJSON(w, http.StatusOK, ov)
	return nil
}

// RoundEntry is one line of GET /v1/rounds/{type}.
type RoundEntry struct {
	Key   debounce.RoundKey `json:"key"`
	Round debounce.Token    `json:"round"`
	// State: "pending" (its round waits in Redis), "started" (its job was
	// taken: running, or done and not yet acknowledged) or "other" (another
	// round of the key is pending; this message is a leftover).
	State       string          `json:"state"`
	Scheduled   bool            `json:"scheduled"` // its schedule has not fired (or, held in Redis, its job is not published yet)
	DueAt       time.Time       `json:"due_at,omitzero"`
	OpenedAt    time.Time       `json:"opened_at,omitzero"`
	FirstSeen   time.Time       `json:"first_seen,omitzero"`
	LastSeen    time.Time       `json:"last_seen,omitzero"`
	Events      int             `json:"events"`
	Items       int             `json:"items,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"` // the message's args (the opening event's; payload last: the latest's in payload)
	ArgsTrimmed bool            `json:"args_truncated,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Fingerprint string          `json:"fingerprint,omitempty"`
	Seq         uint64          `json:"seq"`
}

// RoundsPage is GET /v1/rounds/{type}.
type RoundsPage struct {
	Type   string       `json:"type"`
	Rounds []RoundEntry `json:"rounds"`
	// Next is the cursor of the next page (?after=), "" after the last.
	Next string `json:"next"`
}

// maxArgsShown: longer args are left out of a listing (the round's page
// shows them).
const maxArgsShown = 2048

func (d *Dashboard) policyOf(jobType string) (debounce.Policy, error) {
	p, ok := d.cfg.Coalescer.Policy(jobType)
	if !ok {
		return p, errf(http.StatusNotFound, "no_policy", "type", "no policy for job type %q; see GET /v1/policies", jobType)
	}
	return p, nil
}

func (d *Dashboard) listRounds(w http.ResponseWriter, r *http.Request) error {
	typ := r.PathValue("type")
	if _, err := d.policyOf(typ); err != nil {
		return err
	}
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return errf(http.StatusBadRequest, "invalid_request", "after", "after %q: the next cursor of the previous page (a whole number)", v)
		}
		after = n
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > publisher.MaxRoundsPage {
			return errf(http.StatusBadRequest, "invalid_request", "limit", "limit %q: want 1 to %d", v, publisher.MaxRoundsPage)
		}
		limit = n
	}
	page := RoundsPage{Type: typ}
	if d.cfg.Coalescer.Deferred(typ) && (after == 0 || after >= dueCursor) {
		// Rounds held in Redis until due come first, in due order; then
		// the stream's messages (jobs forwarded, waiting or running).
		offset := 0
		if after >= dueCursor {
			offset, after = int(after-dueCursor), 0
		}
		held, err := d.cfg.Coalescer.DueRounds(r.Context(), typ, offset, limit)
		if err != nil {
			return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
		}
		if err := d.heldEntries(r.Context(), typ, held, &page); err != nil {
			return err
		}
		if len(held) == limit {
			page.Next = strconv.FormatUint(dueCursor+uint64(offset+limit), 10)
			writeJSON(w, http.StatusOK, page)
			return nil
		}
		limit -= len(held)
	}
	msgs, next, err := d.cfg.Publisher.Rounds(r.Context(), typ, after, limit)
	if err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "%v", err)
	}
	keys := make([]debounce.RoundKey, len(msgs))
	for i, m := range msgs {
		keys[i] = m.Key
	}
	rounds, found, err := d.cfg.Coalescer.InspectMany(r.Context(), typ, keys)
	if err != nil {
		return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
	}
	if page.Rounds == nil {
		page.Rounds = make([]RoundEntry, 0, len(msgs))
	}
	if next != 0 {
		page.Next = strconv.FormatUint(next, 10)
	}
	for i, m := range msgs {
		e := RoundEntry{Key: m.Key, Round: m.Job.Token, Scheduled: m.Scheduled, DueAt: m.Job.DueAt, OpenedAt: m.Job.OpenedAt, Seq: m.Seq, State: "started"}
		if m.Err == nil {
			e.Fingerprint = m.Job.Fingerprint.String()
		}
		if len(m.Args) <= maxArgsShown && json.Valid(m.Args) {
			e.Args = json.RawMessage(m.Args)
		} else {
			e.ArgsTrimmed = true
		}
		if found[i] {
			rd := rounds[i]
			switch {
			case rd.Token == m.Job.Token:
				e.State = "pending"
				e.Events, e.Items, e.FirstSeen, e.LastSeen = rd.Events, rd.Items, rd.FirstSeen, rd.LastSeen
				if !rd.DueAt.IsZero() {
					e.DueAt = rd.DueAt // an extended round's latest due time
				}
				if len(rd.Payload) <= maxArgsShown {
					e.Payload = rd.Payload
				}
			default:
				e.State = "other"
			}
		}
		page.Rounds = append(page.Rounds, e)
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// dueCursor: a listing's cursor at or above it is an offset into the type's
// due list (rounds held in Redis until due), below it a stream sequence.
const dueCursor = 1 << 62

// heldEntries adds a page of rounds held in Redis until due to page.
func (d *Dashboard) heldEntries(ctx context.Context, typ string, held []debounce.DueRound, page *RoundsPage) error {
	keys := make([]debounce.RoundKey, len(held))
	for i, h := range held {
		keys[i] = h.Job.Key
	}
	rounds, found, err := d.cfg.Coalescer.InspectMany(ctx, typ, keys)
	if err != nil {
		return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
	}
	for i, h := range held {
		if !found[i] || rounds[i].Token != h.Job.Token {
			continue // taken or replaced since
		}
		rd := rounds[i]
		e := RoundEntry{Key: h.Job.Key, Round: h.Job.Token, Scheduled: true, State: "pending", DueAt: h.Job.DueAt, OpenedAt: h.Job.OpenedAt,
			Fingerprint: h.Job.Fingerprint.String(), Events: rd.Events, Items: rd.Items, FirstSeen: rd.FirstSeen, LastSeen: rd.LastSeen}
		if !rd.DueAt.IsZero() {
			e.DueAt = rd.DueAt
		}
		if len(h.Job.Args) <= maxArgsShown && json.Valid(h.Job.Args) {
			e.Args = json.RawMessage(h.Job.Args)
		} else {
			e.ArgsTrimmed = true
		}
		if len(rd.Payload) <= maxArgsShown {
			e.Payload = rd.Payload
		}
		page.Rounds = append(page.Rounds, e)
	}
	return nil
}

// SearchResult is GET /v1/search.
type SearchResult struct {
	Type string `json:"type"`
	// Kind is how the query was read: "key" (64 hex digits: a round key,
	// which is the fingerprint when the policy keys on all args), "args"
	// (JSON: the key computed as explain does) or "explicit_key" (any
	// other text: an event's key).
	Kind          string            `json:"kind"`
	Key           debounce.RoundKey `json:"key"`
	CanonicalArgs json.RawMessage   `json:"canonical_args,omitempty"`
	KeyFields     []string          `json:"key_fields,omitempty"`
	Round         *debounce.Round   `json:"round"` // null when nothing is pending
}

func (d *Dashboard) search(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	typ, query := q.Get("type"), strings.TrimSpace(q.Get("q"))
	if _, err := d.policyOf(typ); err != nil {
		return err
	}
	if query == "" {
		return errf(http.StatusBadRequest, "invalid_request", "q", "q: give a round key (64 hex digits), args as JSON ({\"tenant_id\":42}) or an event's explicit key")
	}
	res := SearchResult{Type: typ}
	var round debounce.Round
	var found bool
	var err error
	switch {
	case len(query) == 64 && isHex(query):
		res.Kind = "key"
		res.Key, _ = debounce.ParseRoundKey(strings.ToLower(query))
		round, found, err = d.cfg.Coalescer.Inspect(r.Context(), typ, res.Key)
	case strings.HasPrefix(query, "{") || strings.HasPrefix(query, "["):
		res.Kind = "args"
		var ex debounce.Explanation
		ex, err = d.cfg.Coalescer.Explain(r.Context(), debounce.Event{Type: typ, Args: json.RawMessage(query)})
		var ee *debounce.EventError
		if errors.As(err, &ee) {
			return errf(http.StatusBadRequest, ee.Code, "q", "q: %s", ee.Msg)
		}
		if err != nil && errors.Is(err, debounce.ErrInvalidEvent) {
			return errf(http.StatusBadRequest, "invalid_args", "q", "q: %v", err)
		}
		res.Key, res.CanonicalArgs, res.KeyFields = ex.Key, ex.Canonical, ex.KeyFields
		if ex.Pending != nil {
			round, found = *ex.Pending, true
		}
	default:
		res.Kind = "explicit_key"
		if len(query) > debounce.MaxExplicitKeyLen {
			return errf(http.StatusBadRequest, "invalid_key", "q", "q: an explicit key is at most %d bytes", debounce.MaxExplicitKeyLen)
		}
		res.Key = debounce.ExplicitKey(typ, query)
		round, found, err = d.cfg.Coalescer.Inspect(r.Context(), typ, res.Key)
	}
	if err != nil {
		return errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
	}
	if found {
		res.Round = &round
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// roundKeyOf reads the {key} of a path.
func roundKeyOf(r *http.Request) (debounce.RoundKey, error) {
	key, err := debounce.ParseRoundKey(r.PathValue("key"))
	if err != nil {
		return key, errf(http.StatusBadRequest, "invalid_key", "key", "%s: the round key is the 64 hex digits a decision returns as key", r.PathValue("key"))
	}
	return key, nil
}

func (d *Dashboard) history(w http.ResponseWriter, r *http.Request) error {
	typ := r.PathValue("type")
	if _, err := d.policyOf(typ); err != nil {
		return err
	}
	key, err := roundKeyOf(r)
	if err != nil {
		return err
	}
	tl, err := d.timeline(r.Context(), typ, key, time.Now())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tl)
	return nil
}

// Worker is one consumer of the job stream.
type Worker struct {
	Name          string    `json:"name"`
	Filters       []string  `json:"filter_subjects"`
	Pending       uint64    `json:"pending"`     // jobs not yet delivered
	AckPending    int       `json:"ack_pending"` // delivered, not yet acknowledged (running)
	Redelivered   int       `json:"redelivered"` // delivered more than once, not yet acknowledged
	Waiting       int       `json:"waiting"`     // pull requests waiting: idle workers
	LastDelivered time.Time `json:"last_delivered,omitzero"`
	AckWait       string    `json:"ack_wait"`
	MaxDeliver    int       `json:"max_deliver"`
}

// WorkersPage is GET /v1/workers.
type WorkersPage struct {
	Stream   string   `json:"stream"`
	Messages uint64   `json:"messages"`
	Workers  []Worker `json:"workers"`
}

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) error {
	s, err := d.cfg.JetStream.Stream(r.Context(), d.cfg.Publisher.Stream())
	if err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "%v", err)
	}
	info, err := s.Info(r.Context())
	if err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "%v", err)
	}
	page := WorkersPage{Stream: d.cfg.Publisher.Stream(), Messages: info.State.Msgs, Workers: []Worker{}}
	lister := s.ListConsumers(r.Context())
	for ci := range lister.Info() {
		wk := Worker{Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending, Redelivered: ci.NumRedelivered,
			Waiting: ci.NumWaiting, AckWait: ci.Config.AckWait.String(), MaxDeliver: ci.Config.MaxDeliver, Filters: ci.Config.FilterSubjects}
		if ci.Config.FilterSubject != "" {
			wk.Filters = append(wk.Filters, ci.Config.FilterSubject)
		}
		if ci.Delivered.Last != nil {
			wk.LastDelivered = *ci.Delivered.Last
		}
		page.Workers = append(page.Workers, wk)
	}
	if err := lister.Err(); err != nil {
		return errf(http.StatusServiceUnavailable, "stream_unavailable", "", "%v", err)
	}
	slices.SortFunc(page.Workers, func(a, b Worker) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, page)
	return nil
}
