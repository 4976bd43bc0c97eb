package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Interval is a span of wall-clock time, unix ns.
type Interval struct{ From, To int64 }

// Input is what the checks read: the load generator's log, the workers'
// job-start logs, and when Redis lost its data.
type Input struct {
	Events []EventRecord
	Starts []JobStart
	// RedisLoss: each Redis restart (killed at From, answering again at To);
	// every reservation was lost.
	RedisLoss []Interval
	// HeldInRedis: debounce rounds were held in Redis until due (schedules:
	// redis): such a round's job lived only in Redis until a forwarder
	// published it, so a Redis restart without its data before then loses
	// the job, not only its data (documented).
	HeldInRedis bool
	// Throttle: the window of each throttle policy, by job type.
	Throttle map[string]time.Duration
	// Accumulate and Last name the job types whose payload is accumulate
	// (item field id) and last: their payload is checked at job start.
	Accumulate, Last map[string]bool
	// SnapshotLoss: the moments before each SIGKILL of an embedded daemon
	// whose in-process Redis had not reached its snapshot yet (documented
	// loss: at most the last snapshot interval).
	SnapshotLoss []Interval
	// ClockSlack: how far the Redis clock that times throttle windows may
	// lag real time (the embedded Redis moves its clock every 50 ms).
	ClockSlack time.Duration
	// Resubmitted: locally joined events a producer submitted again, their
	// round gone at the flush (from the producers' logs).
	Resubmitted []Resubmission
	// ProducerKills: the SIGKILLs of producers (p0, p1: the index of
	// EventRecord.Producer).
	ProducerKills []Kill
	// FailoverLoss: each Redis failover without replica acks: from a moment
	// before the replica's link was held back to the SIGKILL of the
	// primary. A write applied in it may be missing on the promoted replica
	// (documented: what acks are for).
	FailoverLoss []Interval
	// AOFLoss: each SIGKILL of a redis-server with appendfsync everysec
	// that held answered writes not yet written to its AOF (INFO
	// persistence, read just before the kill: aof_buffer_length > 0 or an
	// fsync pending). While a background fsync is slow Redis postpones
	// writing its AOF buffer for up to 2 s and answers meanwhile, so a
	// process kill then loses up to 2 s of answered writes (Redis's own
	// behaviour; appendfsync always has no such window). From is the kill
	// minus 2 s, To the kill.
	AOFLoss []Interval
	// AckedFailovers: each Redis failover with replica acks on (from the
	// moment the replica's link was held back to the primary's SIGKILL).
	// Accepted decisions were replicated; the counts of locally joined
	// events (LocalTypes) answered in the flush interval before may not
	// be (documented: as a producer crash's), never their coverage.
	AckedFailovers []Interval
	// LocalTypes: the job types whose events may be answered locally.
	LocalTypes map[string]bool
}

// Kill is a producer's SIGKILL.
type Kill struct {
	Producer int
	At       int64 // unix ns
}

// unflushedWindow bounds how long after its answer, before its producer's
// SIGKILL, a locally joined event may still wait for its flush (the flush
// interval, 50 ms by default since issue 25's eighth pass and 2 ms before,
// plus the flush's round trip under the scenarios' injected latency).
const unflushedWindow = int64(250 * time.Millisecond)

// Causes of a concurrent duplicate round (I2).
const (
	CauseBypass    = "fail-open bypass"
	CauseRedisLoss = "redis data loss"
	CauseLost      = "reservation lost (A's job found missing/stale_token)"
	CauseNeverRan  = "A never started"
	CauseUnexplain = "UNEXPLAINED"
	// CauseStaleClock: a throttle window whose request took longer than a
	// window: its end was computed from the producer's clock before the
	// delay, so it may have been over before its SET ran.
	CauseStaleClock = "window over before it began (request slower than a window)"
	// CauseArtifact is not a duplicate round: see dupCause. Counted apart.
	CauseArtifact = "artifact"
	// CauseSnapshot: accepted within the last snapshot interval before an
	// embedded daemon was killed: its in-process Redis kept what it had
	// written to its snapshot, not later changes (documented).
	CauseSnapshot = "embedded daemon killed within a snapshot interval"
	// CauseUnanswered: a summary counts more events than accepted decisions
	// carry its round: requests that reached Redis and whose answer the
	// client never got (producer killed, connection dropped).
	CauseUnanswered = "requests applied whose answer was lost"
	// CauseResubmitted: locally joined events whose flush found the round
	// gone (taken while Redis was unreachable, or lost with its data) were
	// submitted again: the round counts fewer events than the decisions
	// carrying it, the key's next round more.
	CauseResubmitted = "local joins submitted again, their round gone at the flush"
	// CauseUnflushed: an event answered locally by a producer killed before
	// its flush: its round's job covers it, but the round's count lacks it
	// (the documented crash window of local joins).
	CauseUnflushed = "local join of a producer killed before its flush"
	// CauseFailover: a write applied while the replica's link was held
	// back, before the primary was killed and the replica promoted, with
	// replica acks off: the promoted replica never had it (documented).
	CauseFailover = "redis failover without replica acks"
	// CauseAOFPostponed: a write answered by a redis-server (appendfsync
	// everysec) killed while a slow fsync kept it out of the AOF file.
	CauseAOFPostponed = "redis killed with answered writes not yet in its AOF (everysec, slow fsync)"
	// CauseLocalFailover: a locally joined event's count flushed to a
	// primary that failed over before its replica confirmed the flush
	// (acks on): the round's job covers it, its count lacks it.
	CauseLocalFailover = "local-join count flushed unconfirmed before a failover"
)

// Result is what the checks found in one scenario.
type Result struct {
	Sent, Accepted, Throttled, Bypassed int
	Errors                              map[string]int // not accepted, by status or error kind
	Rounds                              int            // distinct rounds accepted events went into (bypassed: one each)
	JobsStarted                         int            // handler starts, every delivery
	RoundsStarted                       int            // distinct rounds (tokens) started
	RepeatStarts                        int            // starts beyond a round's first
	UnacceptedRan                       int            // rounds whose job ran but no accepted event names them
	Releases                            map[string]int // job starts by release result

	Lost       int
	LostDetail []string
	// LostExplained: accepted events not covered by a job start, by a
	// documented cause (accepted within the last snapshot interval before
	// an embedded daemon was killed).
	LostExplained map[string]int

	Dups      int
	DupCauses map[string]int
	// Artifacts: overlaps measured with a round whose job then found its
	// own reservation intact, which proves they did not overlap; the
	// largest gap between such a release and its log line.
	Artifacts      int
	ArtifactMax    time.Duration
	ArtifactDetail []string
	DupDetail      []string
	Fencing        int
	FenceDtl       []string
	// FencingExplained: rounds released with fewer events than accepted
	// decisions carry them, by a documented cause (a Redis restart without
	// persistence, an embedded daemon killed within a snapshot interval).
	FencingExplained map[string]int

	// Payload (I1 at payload level): accepted accumulate events whose item
	// is in no job of their round started after them, and payload-last
	// rounds whose job carried an event older than one accepted after it.
	PayloadLost   int
	PayloadCauses map[string]int
	PayloadDetail []string
	PayloadItems  int // accumulate events whose item reached a job
	PayloadLast   int // payload-last rounds checked
	// Counts: rounds whose first released job's summary counts exactly the
	// accepted decisions carrying the round, more by requests whose answer
	// was lost (explained), or otherwise (off).
	CountExact, CountSurplus, CountOff int
	CountDetail                        []string
	LateP50                            time.Duration // schedule lateness: first start of a round - its due time
	LateP99                            time.Duration
	LateMax                            time.Duration
	AccumFired                         int // accumulate jobs that started with >= 50 items
	// TokenCollisions: round tokens carried by rounds of two or more keys.
	TokenCollisions  int
	LostToCollisions int // lost events whose round's token another key's round also had
	// StaleWindows: pairs of throttle windows of a key whose nominal
	// intervals (from the producers' clocks) overlap, by up to StaleMax;
	// BornExpired of them were certainly over before their SET ran.
	StaleWindows    int
	StaleMax        time.Duration
	BornExpired     int
	CollisionDetail []string

	// RoundsRunTwice: rounds (tokens) whose job took them fresh ("released")
	// more than once: the round came back pending after its job started (a
	// failover lost the take). ItemsTwice: accumulate items of such a round
	// that were in its first job and in a later one.
	RoundsRunTwice, ItemsTwice int
	RunTwiceDetail             []string
	// From an accepted event's answer to the first job start of its round
	// after it was sent (events whose round never started left out).
	AcceptToJobP50, AcceptToJobP99, AcceptToJobMax time.Duration
}

func roundID(typ, key, token string) string { return typ + "/" + key + "/" + token }

const maxDetail = 12

func addDetail(list *[]string, s string) {
	if len(*list) < maxDetail {
		*list = append(*list, s)
	}
}

type round struct {
	id       string // token, or "bypass:"+eid
	typ, key string
	lo       int64 // lower bound of the opening: the first request carrying it was sent
	hi       int64 // upper bound of the opening: the first answer carrying it (or its start)
	end      int64 // first job start (math.MaxInt64: never)
	first    string
	bypass   bool
}

type window struct {
	key        string
	token      string
	exp        int64 // unix ms
	start      int64 // unix ms, as the producer computed it
	sent, done int64 // the leading event's request, unix ns
}

func ms(ns int64) string {
	if ns == math.MaxInt64 {
		return "never"
	}
	return time.Unix(0, ns).Format("15:04:05.000")
}

// Check computes I1, I2 and I3 from the logs.
func Check(in Input) Result {
	r := Result{Errors: map[string]int{}, DupCauses: map[string]int{}, Releases: map[string]int{},
		FencingExplained: map[string]int{}, PayloadCauses: map[string]int{}, LostExplained: map[string]int{}}

	// Job starts, by round and (bypassed) by event id. A round is named by
	// its job type, key and token: tokens are not unique across keys.
	byRound := map[string][]JobStart{}
	byEID := map[string][]JobStart{}
	tokenKeys := map[string]map[string]bool{} // token -> type/key using it
	useToken := func(tok, typeKey string) {
		if tokenKeys[tok] == nil {
			tokenKeys[tok] = map[string]bool{}
		}
		tokenKeys[tok][typeKey] = true
	}
	for _, s := range in.Starts {
		r.JobsStarted++
		r.Releases[s.Release]++
		if s.Round == "" {
			byEID[s.EID] = append(byEID[s.EID], s)
			continue
		}
		byRound[roundID(s.Type, s.Key, s.Round)] = append(byRound[roundID(s.Type, s.Key, s.Round)], s)
		useToken(s.Round, s.Type+"/"+s.Key)
	}
	for _, ss := range byRound {
		slices.SortFunc(ss, func(a, b JobStart) int { return cmp.Compare(a.At, b.At) })
		r.RoundsStarted++
		r.RepeatStarts += len(ss) - 1
		if ss[0].Items >= 50 {
			r.AccumFired++
		}
	}
	for _, ss := range byEID {
		slices.SortFunc(ss, func(a, b JobStart) int { return cmp.Compare(a.At, b.At) })
		r.RepeatStarts += len(ss) - 1
	}

	// I1 and the rounds of I2.
	rounds := map[string]*round{}
	var bypassRounds []*round
	var windows []window
	perToken := map[string]int{}    // by round id
	sentIn := map[string][]int64{}  // by round id: when its accepted events were sent
	lostRounds := map[string]int{}  // lost events by round id
	firstSent := map[string]int64{} // the first accepted event of each round, when sent
	for i := range in.Events {
		if e := &in.Events[i]; e.Accepted() && e.Round != "" {
			rid := roundID(e.Type, e.Key, e.Round)
			if at, ok := firstSent[rid]; !ok || e.Sent < at {
				firstSent[rid] = e.Sent
			}
		}
	}
	for i := range in.Events {
		e := &in.Events[i]
		r.Sent++
		if !e.Accepted() {
			k := strconv.Itoa(e.Status)
			if e.Status == 0 {
				k = "transport"
			}
			r.Errors[k]++
			continue
		}
		r.Accepted++
		switch e.Outcome {
		case "throttled":
			r.Throttled++
			continue
		case "bypassed":
			r.Bypassed++
			r.Rounds++
			br := &round{id: "bypass:" + e.EID, typ: e.Type, key: e.Key, lo: e.Sent, hi: e.Done, end: math.MaxInt64, bypass: true}
			covered := false
			for _, s := range byEID[e.EID] {
				if s.At > e.Sent {
					covered = true
					br.end, br.first = s.At, s.Release
					break
				}
			}
			br.hi = min(br.hi, br.end-1)
			bypassRounds = append(bypassRounds, br)
			if !covered && snapshotCause(e.Sent, e.Done, in) != "" {
				r.LostExplained[CauseSnapshot]++
			} else if !covered {
				r.Lost++
				addDetail(&r.LostDetail, fmt.Sprintf("%s %s key %.12s bypassed (eid %s, sent %s): no job start without a token carrying it", e.Type, e.EID, e.Key, e.EID, ms(e.Sent)))
			}
			continue
		}
		if e.Round == "" {
			r.Lost++
			addDetail(&r.LostDetail, fmt.Sprintf("%s %s: outcome %s with no round token", e.Type, e.EID, e.Outcome))
			continue
		}
		rid := roundID(e.Type, e.Key, e.Round)
		perToken[rid]++
		sentIn[rid] = append(sentIn[rid], e.Sent)
		useToken(e.Round, e.Type+"/"+e.Key)
		// I1: a start of this round after the event was sent.
		ss := byRound[rid]
		covered := false
		for _, s := range ss {
			if s.At > e.Sent {
				covered = true
				break
			}
		}
		if !covered && snapshotCause(e.Sent, e.Done, in) != "" {
			r.LostExplained[CauseSnapshot]++
			covered = true
		}
		if !covered && failoverCause(e.Sent, e.Done, in) != "" {
			r.LostExplained[CauseFailover]++
			covered = true
		}
		if !covered && aofCause(e.Sent, e.Done, in) != "" {
			r.LostExplained[CauseAOFPostponed]++
			covered = true
		}
		if cause := heldLossCause(e, firstSent[rid], in); !covered && len(ss) == 0 && cause != "" {
			r.LostExplained[cause]++
			covered = true
		}
		if !covered {
			r.Lost++
			why := "no job start of that round at all"
			if len(ss) > 0 {
				why = fmt.Sprintf("its %d start(s) all before the event was sent (first %s, %s)", len(ss), ms(ss[0].At), ss[0].Release)
			}
			lostRounds[rid]++
			addDetail(&r.LostDetail, fmt.Sprintf("%s %s key %.12s outcome %s round %s (sent %s, answered %s, due %s): %s",
				e.Type, e.EID, e.Key, e.Outcome, e.Round, ms(e.Sent), ms(e.Done), msTime(e.DueAt), why))
		}
		// I2: throttle leading windows apart; every other token is a round.
		if w, ok := in.Throttle[e.Type]; ok && e.Outcome == "published" {
			tok, _ := strconv.ParseUint(e.Round, 16, 64)
			exp := int64(tok >> 14)
			windows = append(windows, window{key: e.Type + "/" + e.Key, token: e.Round, exp: exp, start: exp - w.Milliseconds(), sent: e.Sent, done: e.Done})
			continue
		}
		rd := rounds[rid]
		if rd == nil {
			rd = &round{id: e.Round, typ: e.Type, key: e.Key, lo: e.Sent, hi: e.Done, end: math.MaxInt64}
			if len(ss) > 0 {
				rd.end, rd.first = ss[0].At, ss[0].Release
			}
			rounds[rid] = rd
		}
		rd.lo = min(rd.lo, e.Sent)
		rd.hi = min(rd.hi, e.Done, rd.end-1)
	}
	r.Rounds += len(rounds)
	windowTokens := map[string]bool{}
	for _, w := range windows {
		windowTokens[w.key+"/"+w.token] = true
	}
	r.Rounds += len(windowTokens)
	for rid, ss := range byRound {
		if rounds[rid] == nil && !windowTokens[rid] {
			if _, isThrottle := in.Throttle[ss[0].Type]; isThrottle && ss[0].DueAt == 0 {
				continue // a leading job whose decision we never saw
			}
			r.UnacceptedRan++
		}
	}

	// I3: a job that released its round saw at least the accepted events
	// that name its token and were sent before it started. (Normally every
	// one of them: events that name a round were applied before its take.
	// A round restored stale from an embedded daemon's snapshot takes
	// events again after its first job, for a second one.)
	for rid, ss := range byRound {
		for _, s := range ss {
			if s.Release != "released" {
				continue
			}
			n := 0
			for _, sent := range sentIn[rid] {
				if sent < s.At {
					n++
				}
			}
			if s.Events < n {
				if cause := fencingCause(rid, rounds[rid], s.At, in); cause != "" {
					r.FencingExplained[cause]++
					continue
				}
				r.Fencing++
				addDetail(&r.FenceDtl, fmt.Sprintf("%s round %s key %.12s: released with %d events, %d accepted decisions carry it", s.Type, s.Round, s.Key, s.Events, n))
			}
		}
	}
	checkPayloads(in, &r, byRound, rounds, perToken)

	// I2: rounds of one key that were both open at once. Round X opened at
	// some time before X.hi and was released before X.end; X and Y surely
	// overlapped when max(X.hi, Y.hi) < min(X.end, Y.end).
	byKey := map[string][]*round{}
	for _, rd := range rounds {
		byKey[rd.typ+"/"+rd.key] = append(byKey[rd.typ+"/"+rd.key], rd)
	}
	for _, rd := range bypassRounds {
		byKey[rd.typ+"/"+rd.key] = append(byKey[rd.typ+"/"+rd.key], rd)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rs := byKey[k]
		slices.SortFunc(rs, func(a, b *round) int { return cmp.Or(cmp.Compare(a.hi, b.hi), strings.Compare(a.id, b.id)) })
		for j, b := range rs {
			var a *round
			cause, artifact := "", time.Duration(0)
			for i := j - 1; i >= 0; i-- {
				c := rs[i]
				if max(c.hi, b.hi) >= min(c.end, b.end) {
					continue
				}
				if cc := dupCause(c, b, in); cc != CauseArtifact {
					a, cause = c, cc
					break
				}
				if gap := time.Duration(c.end - b.hi); gap > artifact {
					artifact = gap
					if gap > time.Second {
						addDetail(&r.ArtifactDetail, fmt.Sprintf("%s: round %s (opened by %s, first start %s %s) and round %s (opened by %s, first start %s %s): gap %v",
							k, c.id, ms(c.hi), ms(c.end), c.first, b.id, ms(b.hi), ms(b.end), b.first, gap))
					}
				}
			}
			if a == nil {
				if artifact > 0 {
					r.Artifacts++
					r.ArtifactMax = max(r.ArtifactMax, artifact)
				}
				continue
			}
			r.Dups++
			r.DupCauses[cause]++
			if cause == CauseUnexplain || len(r.DupDetail) < 4 {
				addDetail(&r.DupDetail, fmt.Sprintf("%s: round %s (opened by %s, first start %s %s) and round %s (opened by %s, first start %s %s): %s",
					k, a.id, ms(a.hi), ms(a.end), a.first, b.id, ms(b.hi), ms(b.end), b.first, cause))
			}
		}
	}
	// Throttle: one leading job per window. Windows of a key never coexist
	// in Redis (SET NX), but a window's end is computed on the producer
	// before its request reaches Redis, so a delayed request opens a
	// shorter window, or one already over (SET with a past PXAT succeeds
	// and leaves no key). A pair of leading jobs is a duplicate when they
	// were certainly published less than a window apart: the later one was
	// answered less than a window after the earlier one was sent. Nominal
	// overlaps short of that are counted apart (StaleWindows).
	slices.SortFunc(windows, func(a, b window) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.sent, b.sent), strings.Compare(a.token, b.token))
	})
	for i := 1; i < len(windows); i++ {
		p, w := windows[i-1], windows[i]
		if p.key != w.key || p.token == w.token {
			continue
		}
		wlen := (p.exp - p.start) * 1e6
		if w.start < p.exp || p.start < w.exp && w.exp <= p.exp {
			r.StaleWindows++
			r.StaleMax = max(r.StaleMax, time.Duration(min(p.exp, w.exp)-max(p.start, w.start))*time.Millisecond)
			if w.exp <= p.exp {
				r.BornExpired++
			}
		}
		if w.done-p.sent >= wlen-int64(in.ClockSlack) {
			continue
		}
		r.Dups++
		cause := CauseUnexplain
		if c := lossCause(p.sent, w.done, p.sent, p.done, in); c != "" {
			cause = c
		}
		if cause == CauseUnexplain && (p.done-p.sent >= wlen || w.done-w.sent >= wlen) {
			cause = CauseStaleClock
		}
		cause = "throttle window: " + cause
		r.DupCauses[cause]++
		addDetail(&r.DupDetail, fmt.Sprintf("%s: leading jobs of throttle windows %s [%s, %s] (request %s-%s) and %s [%s, %s] (request %s-%s) less than a window apart: %s",
			w.key, p.token, msTime(p.start), msTime(p.exp), ms(p.sent), ms(p.done), w.token, msTime(w.start), msTime(w.exp), ms(w.sent), ms(w.done), cause))
	}

	// Tokens shared by rounds of different keys, and the lost rounds among them.
	for tok, keys := range tokenKeys {
		if len(keys) < 2 {
			continue
		}
		r.TokenCollisions++
		names := make([]string, 0, len(keys))
		lost := 0
		for k := range keys {
			names = append(names, fmt.Sprintf("%.22s", k))
			if n := lostRounds[k+"/"+tok]; n > 0 {
				lost++
				r.LostToCollisions += n
			}
		}
		sort.Strings(names)
		addDetail(&r.CollisionDetail, fmt.Sprintf("token %s used by %d rounds (%s), %d of them lost", tok, len(keys), strings.Join(names, ", "), lost))
	}

	checkTwice(in, &r, byRound)

	// Schedule lateness: the first start of each scheduled round.
	var late []time.Duration
	for _, ss := range byRound {
		if s := ss[0]; s.DueAt > 0 {
			late = append(late, time.Duration(s.At-s.DueAt*1e6))
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		r.LateP50 = late[len(late)/2]
		r.LateP99 = late[len(late)*99/100]
		r.LateMax = late[len(late)-1]
	}
	return r
}

// checkTwice counts the rounds whose job took them fresh more than once and
// their items in two jobs, and measures accept-to-job delays.
func checkTwice(in Input, r *Result, byRound map[string][]JobStart) {
	for rid, ss := range byRound {
		var fresh []JobStart
		for _, s := range ss {
			if s.Release == "released" {
				fresh = append(fresh, s)
			}
		}
		if len(fresh) < 2 {
			continue
		}
		r.RoundsRunTwice++
		twice := 0
		for _, it := range fresh[0].ItemList {
			for _, later := range fresh[1:] {
				if slices.Contains(later.ItemList, it) {
					twice++
					break
				}
			}
		}
		r.ItemsTwice += twice
		addDetail(&r.RunTwiceDetail, fmt.Sprintf("%s: taken fresh %d times (first %s, then %s), %d items in two jobs",
			rid, len(fresh), ms(fresh[0].At), ms(fresh[1].At), twice))
	}
	var delays []time.Duration
	for i := range in.Events {
		e := &in.Events[i]
		if !e.Accepted() || e.Round == "" || e.Outcome == "throttled" || e.Outcome == "bypassed" {
			continue
		}
		for _, s := range byRound[roundID(e.Type, e.Key, e.Round)] {
			if s.At > e.Sent {
				delays = append(delays, time.Duration(max(s.At-e.Done, 0)))
				break
			}
		}
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		r.AcceptToJobP50 = delays[len(delays)/2]
		r.AcceptToJobP99 = delays[len(delays)*99/100]
		r.AcceptToJobMax = delays[len(delays)-1]
	}
}

func msTime(unixMs int64) string {
	if unixMs == 0 {
		return "-"
	}
	return time.UnixMilli(unixMs).Format("15:04:05.000")
}

func dupCause(a, b *round, in Input) string {
	if a.bypass || b.bypass {
		return CauseBypass
	}
	// A's job closed A with A's own token (released), or found it closed by
	// an earlier delivery of the same job (retry): A's reservation held
	// from A's opening to its release, so B, which opened on an empty key,
	// opened after that release. The overlap measured is the gap between
	// the release and the log line written as the handler starts.
	if a.first == "released" || a.first == "retry" {
		return CauseArtifact
	}
	// A opened before Redis came back, B after it went down; or A opened
	// after an embedded daemon's last snapshot before it was killed.
	if c := lossCause(a.lo, b.hi, a.lo, a.hi, in); c != "" {
		return c
	}
	switch {
	case a.first == "missing" || a.first == "stale_token":
		return CauseLost
	case a.end == math.MaxInt64:
		return CauseNeverRan
	}
	return CauseUnexplain
}

// Overlaps finds, for the job types with exclusive keys, jobs of one key
// whose handlers ran at the same time: each start paired with its end line
// (a job whose worker was killed has none and is left out). An overlap
// whose later job started within a Redis data loss, or within lease of
// its end, is explained: the loss took the lease with it; so is one of a
// job published without a reservation (fail open), which runs without the
// lease when Redis is down.
func Overlaps(starts, ends []JobStart, exclusive map[string]bool, loss []Interval, lease time.Duration) (checked, unexplained, explained int, detail []string) {
	type run struct {
		from, to int64
		s        JobStart
	}
	id := func(j JobStart) string {
		return fmt.Sprint(j.Worker, "/", j.PID, "/", j.Key, "/", j.Round, "/", j.Attempt, "/", j.At)
	}
	ended := map[string]int64{}
	for _, e := range ends {
		ended[id(e)] = e.End
	}
	byKey := map[string][]run{}
	for _, s := range starts {
		if end, ok := ended[id(s)]; ok && exclusive[s.Type] {
			byKey[s.Type+"/"+s.Key] = append(byKey[s.Type+"/"+s.Key], run{s.At, end, s})
			checked++
		}
	}
	for key, rs := range byKey {
		sort.Slice(rs, func(i, j int) bool { return rs[i].from < rs[j].from })
		for i := 1; i < len(rs); i++ {
			prev := rs[i-1]
			for k := 0; k < i-1; k++ { // the latest end before this one
				if rs[k].to > prev.to {
					prev = rs[k]
				}
			}
			cur := rs[i]
			if cur.from >= prev.to {
				continue
			}
			cause := "UNEXPLAINED"
			if prev.s.Round == "" || cur.s.Round == "" {
				// Published without a reservation, Redis down (fail open):
				// it runs without the key's lease, as documented.
				cause = "fail-open bypass ran without the lease"
			}
			for _, l := range loss {
				if cur.from >= l.From && cur.from <= l.To+int64(lease) {
					cause = "redis data loss took the lease"
				}
			}
			if cause == "UNEXPLAINED" {
				unexplained++
			} else {
				explained++
			}
			addDetail(&detail, fmt.Sprintf("%s: %s/%d [%s, %s] and %s/%d from %s (%s)", key, prev.s.Worker, prev.s.Attempt, ms(prev.from), ms(prev.to),
				cur.s.Worker, cur.s.Attempt, ms(cur.from), cause))
		}
	}
	return checked, unexplained, explained, detail
}
