package dashboard

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// DefaultHistoryKeys bounds the keys a History remembers.
const DefaultHistoryKeys = 10_000

// Bounds of what a History keeps per key.
const (
	roundsPerKey   = 8                // the key's latest rounds
	eventsPerRound = 200              // event times of a watched key's round
	watchFor       = 10 * time.Minute // a key's page viewed this recently is watched
	maxWatchedKeys = 64
)

// History remembers, boundedly, the recent rounds of keys as this process
// decided them, for the timeline of a key: each round's opening (and due
// time) always, since a round opens once per job; every event's time only
// for keys someone watches (their page was viewed in the last 10 minutes),
// since joins are the hot path. It sees only this process's decisions: a
// round opened by another producer is known from Redis while pending, and
// events joined elsewhere only by their count.
type History struct {
	mu      sync.Mutex
	keys    map[histKey]*keyHistory
	order   []histKey // oldest first, for eviction
	max     int
	watched atomic.Pointer[map[histKey]time.Time]
}

type histKey struct {
	typ string
	key debounce.RoundKey
}

type keyHistory struct{ rounds []histRound }

// histRound is one remembered round.
type histRound struct {
	token   debounce.Token
	opened  time.Time
	due     time.Time
	events  []time.Time // while watched
	count   int         // events this process decided into it
	outcome debounce.Outcome
}

// NewHistory returns a History of at most maxKeys keys (DefaultHistoryKeys
// when 0).
func NewHistory(maxKeys int) *History {
	if maxKeys <= 0 {
		maxKeys = DefaultHistoryKeys
	}
	h := &History{keys: map[histKey]*keyHistory{}, max: maxKeys}
	h.watched.Store(&map[histKey]time.Time{})
	return h
}

// Decided records a decision: a round's opening always, an event joining
// a round when its key is watched. When nobody watches, a join costs one
// atomic load.
func (h *History) Decided(jobType string, d *debounce.Decision) {
	if h == nil || d.Round == 0 {
		return
	}
	opening := IsJob(d.Outcome)
	w := *h.watched.Load()
	if !opening && len(w) == 0 {
		return // the hot path: a join, nobody watching
	}
	h.decided(jobType, d, w, opening, time.Now())
}

func (h *History) decided(jobType string, d *debounce.Decision, w map[histKey]time.Time, opening bool, now time.Time) {
	hk := histKey{jobType, d.Key}
	_, watching := w[hk]
	if !opening && !watching {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	kh := h.keys[hk]
	if kh == nil {
		if !opening {
			return
		}
		kh = &keyHistory{}
		h.keys[hk] = kh
		h.order = append(h.order, hk)
		for len(h.order) > h.max {
			delete(h.keys, h.order[0])
			h.order = h.order[1:]
		}
	}
	var r *histRound
	for i := range kh.rounds {
		if kh.rounds[i].token == d.Round {
			r = &kh.rounds[i]
		}
	}
	if r == nil {
		if !opening {
			return // a round opened elsewhere: Redis tells its count
		}
		kh.rounds = append(kh.rounds, histRound{token: d.Round, opened: now, outcome: d.Outcome})
		if len(kh.rounds) > roundsPerKey {
			kh.rounds = kh.rounds[len(kh.rounds)-roundsPerKey:]
		}
		r = &kh.rounds[len(kh.rounds)-1]
	}
	r.count++
	if !d.DueAt.IsZero() {
		r.due = d.DueAt
	}
	if watching && len(r.events) < eventsPerRound {
		r.events = append(r.events, now)
	}
}

// Watch marks a key watched for the next 10 minutes: its events' times are
// recorded.
func (h *History) Watch(jobType string, key debounce.RoundKey, now time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.watched.Load()
	next := make(map[histKey]time.Time, len(old)+1)
	for k, t := range old {
		if now.Sub(t) < watchFor {
			next[k] = t
		}
	}
	if len(next) >= maxWatchedKeys {
		return
	}
	next[histKey{jobType, key}] = now
	h.watched.Store(&next)
}

// rounds returns a copy of what is remembered of a key, oldest first.
func (h *History) rounds(jobType string, key debounce.RoundKey) []histRound {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	kh := h.keys[histKey{jobType, key}]
	if kh == nil {
		return nil
	}
	out := make([]histRound, len(kh.rounds))
	for i, r := range kh.rounds {
		r.events = append([]time.Time(nil), r.events...)
		out[i] = r
	}
	return out
}
