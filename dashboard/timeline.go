package dashboard

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// Timeline is GET /v1/rounds/{type}/{key}/history: a key's recent rounds as
// far as this process knows them.
type Timeline struct {
	Type   string            `json:"type"`
	Key    debounce.RoundKey `json:"key"`
	Now    time.Time         `json:"now"`
	Rounds []TimelineRound   `json:"rounds"` // oldest first
	// Sees says where the rounds come from and what is missing.
	Sees string `json:"sees"`
}

// TimelineRound is one round on a timeline.
type TimelineRound struct {
	Round debounce.Token `json:"round"`
	// State: pending (in Redis now), started (its job took the round and has
	// not finished), finished, cancelled, or ended (no longer pending, and
	// Redis no longer says how it ended).
	State     string      `json:"state"`
	OpenedAt  time.Time   `json:"opened_at,omitzero"`
	DueAt     time.Time   `json:"due_at,omitzero"`
	FirstSeen time.Time   `json:"first_seen,omitzero"`
	LastSeen  time.Time   `json:"last_seen,omitzero"`
	Events    int         `json:"events"`              // from Redis while pending, else those this process decided
	EventsAt  []time.Time `json:"events_at,omitempty"` // times this process recorded (a watched key)
	StartedAt time.Time   `json:"started_at,omitzero"`
	Starts    int         `json:"starts,omitempty"`
	EndedAt   time.Time   `json:"finished_at,omitzero"`
	Recorded  bool        `json:"recorded"` // this process opened it
}

// timelineSees is what a timeline can and cannot show.
const timelineSees = "Rounds this daemon opened (the last 8 of a key, for its latest 10,000 keys) and the round pending in Redis now. " +
	"A round's events: their count and first and last times; each event's time only while the key's page is open (10 minutes), and only for events this daemon decided. " +
	"A job's start and finish come from Redis (any worker's, Go or not) while Redis keeps them: the start until the job finishes (or 24 h), the finish for 2 minutes. " +
	"Rounds opened by other producers (the Go library in other processes, other daemon replicas) appear only while pending."

// timeline builds a key's timeline and marks the key watched.
func (d *Dashboard) timeline(ctx context.Context, typ string, key debounce.RoundKey, now time.Time) (Timeline, error) {
	hist := d.cfg.History
	hist.Watch(typ, key, now)
	tl := Timeline{Type: typ, Key: key, Now: now.UTC(), Sees: timelineSees, Rounds: []TimelineRound{}}
	pending, found, err := d.cfg.Coalescer.Inspect(ctx, typ, key)
	if err != nil {
		return tl, errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
	}
	var ended []int
	for _, hr := range hist.rounds(typ, key) {
		tr := TimelineRound{Round: hr.token, OpenedAt: hr.opened, DueAt: hr.due, Events: hr.count, EventsAt: hr.events, Recorded: true, State: "ended"}
		if len(hr.events) > 0 {
			tr.FirstSeen, tr.LastSeen = hr.events[0], hr.events[len(hr.events)-1]
		}
		if found && pending.Token == hr.token {
			continue // shown from Redis below, with these events' times
		}
		ended = append(ended, len(tl.Rounds))
		tl.Rounds = append(tl.Rounds, tr)
	}
	if found {
		tr := TimelineRound{Round: pending.Token, State: "pending", OpenedAt: pending.FirstSeen, DueAt: pending.DueAt,
			FirstSeen: pending.FirstSeen, LastSeen: pending.LastSeen, Events: pending.Events}
		for _, hr := range hist.rounds(typ, key) {
			if hr.token == pending.Token {
				tr.Recorded, tr.EventsAt = true, hr.events
				if tr.OpenedAt.IsZero() || hr.opened.Before(tr.OpenedAt) {
					tr.OpenedAt = hr.opened
				}
			}
		}
		if tr.OpenedAt.IsZero() {
			tr.OpenedAt = pending.LastSeen
		}
		tl.Rounds = append(tl.Rounds, tr)
	}
	if len(ended) > 0 {
		keys, tokens := make([]debounce.RoundKey, len(ended)), make([]debounce.Token, len(ended))
		for i, j := range ended {
			keys[i], tokens[i] = key, tl.Rounds[j].Round
		}
		fates, err := d.cfg.Coalescer.Fates(ctx, typ, keys, tokens)
		if err != nil {
			return tl, errf(http.StatusServiceUnavailable, "store_unavailable", "", "%v", err)
		}
		for i, j := range ended {
			f, tr := fates[i], &tl.Rounds[j]
			tr.StartedAt, tr.Starts, tr.EndedAt = f.StartedAt, f.Starts, f.FinishedAt
			switch {
			case f.Cancelled:
				tr.State = "cancelled"
			case !f.FinishedAt.IsZero():
				tr.State = "finished"
			case !f.StartedAt.IsZero():
				tr.State = "started"
			}
		}
	}
	slices.SortStableFunc(tl.Rounds, func(a, b TimelineRound) int { return a.OpenedAt.Compare(b.OpenedAt) })
	return tl, nil
}

// timelineSVG serves a key's timeline as a picture (the round page's
// <img>): the same data as the history route, drawn by drawTimeline.
func (d *Dashboard) timelineSVG(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	typ := q.Get("type")
	key, err := debounce.ParseRoundKey(q.Get("key"))
	if _, perr := d.policyOf(typ); perr != nil || err != nil {
		http.Error(w, "timeline: give ?type= (a configured job type) and ?key= (64 hex digits)", http.StatusBadRequest)
		return
	}
	tl, err := d.timeline(r.Context(), typ, key, time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(drawTimeline(tl))
}
