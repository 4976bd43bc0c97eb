package devservers

import (
	"bufio"
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// store drives miniredis durably and without walking its keys on a timer.
//
// Every command from a client passes its pre-hook, which runs it under one
// lock (miniredis serialises commands anyway) and, when it wrote, appends
// the new state of the keys it touched to the journal before the reply is
// flushed. Scripts' inner calls pass the same hook (miniredis dispatches
// them too), so the keys a script touches are known even when they are not
// in KEYS.
//
// miniredis keeps TTLs relative to its clock and, with ClockTTL, re-sorts
// and walks every key on each tick (86% of the CPU at 100k keys). Here its
// clock stands at the Unix epoch for good, so every TTL is the absolute
// expiry time (PXAT and PEXPIRETIME stay exact), relative expiries (EX, PX,
// EXPIRE, PEXPIRE) are rewritten absolute, TTL/PTTL/TIME are answered from
// the real clock, and a heap of expiry times deletes each key when it is
// due: before the next command, and every ExpireEvery when idle.
type store struct {
	mr    *miniredis.Miniredis
	srv   *server.Server
	log   *slog.Logger
	now   func() time.Time
	fatal func(error)

	// nested reads miniredis's per-connection "called from Lua" flag.
	ctxType   reflect.Type
	nestedIdx int

	mu       sync.Mutex                  // one command at a time; everything below
	running  atomic.Pointer[server.Peer] // the client whose command runs under mu: its re-dispatch passes
	internal *server.Peer                // the store's own commands
	ibuf     bytes.Buffer                // internal's replies
	iw       *bufio.Writer               // writes into ibuf
	idb      int                         // internal's selected database
	dbs      map[int]*miniredis.RedisDB  // databases seen
	live     map[dbKey]*entry            // every key, with its expiry
	due      expiryHeap                  // the keys with an expiry, soonest first
	peers    map[*server.Peer]*peerState // clients' database and transaction
	cur      map[dbKey]*touch            // keys the command under way touched
	curDB    int                         // its database
	cmdNow   time.Time                   // its time (a script's calls share it)
	refused  map[string]bool             // the cache of refusals
	recs     []byte                      // records of the command under way
	frame    []byte                      // its frame
	jr       *journal                    // nil: memory only
	dir      string                      // the data folder ("" memory only)
	snapSize int64                       // bytes of the last snapshot
	minSize  int64                       // compact once the journal is this big (and the snapshot's size)
	compact  sync.WaitGroup              // a compaction under way
	busy     bool                        // one is
	stats    Stats

	scripts    map[string]*script    // compiled scripts by SHA-1 (scripts.go)
	scriptPeer *server.Peer          // the connection their redis.call runs on
	sbuf       *bytes.Buffer         // its replies
	sw         *bufio.Writer         // writes into sbuf
	sdb        int                   // its selected database
	sr, ir     *bufio.Reader         // read sbuf and ibuf (one reader each, not one per call)
	scans      map[uint64]*scanState // SCAN cursors under way (scan.go)
}

// dbKey is a key of one database.
type dbKey struct {
	db  int
	key string
}

// entry is a live key: its expiry (unix ms, 0 none) and place in the heap.
type entry struct {
	key dbKey
	at  int64
	idx int // in due; -1 when it has no expiry
}

type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// touch is what one command may have changed of one key.
type touch struct {
	level  level
	fields map[string]struct{}
}

// peerState is what the store follows of a client connection.
type peerState struct {
	db int
	tx map[dbKey]*touch // non-nil inside MULTI: the queued commands' keys
}

// Stats count what the store did.
type Stats struct {
	Expired     int64 // keys deleted when their expiry came
	Compactions int64 // snapshots written while serving
	JournalSize int64 // bytes of journal the last snapshot does not cover
}

// epoch is miniredis's clock: TTLs measured from it are expiry times.
var epoch = time.Unix(0, 0)

func newStore(mr *miniredis.Miniredis, srv *server.Server, log *slog.Logger, now func() time.Time, fatal func(error)) (*store, error) {
	s := &store{mr: mr, srv: srv, log: log, now: now, fatal: fatal,
		dbs: map[int]*miniredis.RedisDB{}, live: map[dbKey]*entry{}, peers: map[*server.Peer]*peerState{},
		refused: map[string]bool{}}
	s.iw = bufio.NewWriter(&s.ibuf)
	s.internal = server.NewPeer(s.iw)
	s.scripts = map[string]*script{}
	s.scriptPeer, s.sbuf, s.sw = bufPeer()
	s.sr, s.ir = bufio.NewReader(s.sbuf), bufio.NewReader(&s.ibuf)
	// miniredis marks the connection of a script's inner calls in its
	// (unexported) per-connection state. Read where the flag is once; a
	// miniredis without it is refused here, not misjournaled later.
	if _, err := s.call(0, "PING"); err != nil {
		return nil, fmt.Errorf("devservers: embedded redis: %w", err)
	}
	t := reflect.TypeOf(s.internal.Ctx)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, errors.New("devservers: embedded redis: this miniredis keeps no per-connection state the store can read; pin miniredis v2.40")
	}
	f, ok := t.Elem().FieldByName("nested")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil, errors.New("devservers: embedded redis: this miniredis does not mark scripts' calls (connCtx.nested); pin miniredis v2.40")
	}
	s.ctxType, s.nestedIdx = t, f.Index[0]
	return s, nil
}

// isNested reports whether c is the connection of a script's inner call.
func (s *store) isNested(c *server.Peer) bool {
	v := reflect.ValueOf(c.Ctx)
	if !v.IsValid() || v.Type() != s.ctxType || v.IsNil() {
		return false
	}
	return v.Elem().Field(s.nestedIdx).Bool()
}

// hook is miniredis's pre-hook: it returns true when it ran the command.
func (s *store) hook(c *server.Peer, cmd string, args ...string) bool {
	if c == s.running.Load() || c == s.internal {
		return false // the store's own dispatch: miniredis runs it
	}
	if c == s.scriptPeer || s.isNested(c) {
		return s.nested(c, cmd, args)
	}
	pos := s.outer(c, cmd, args)
	if s.jr != nil {
		// The reply leaves once the journal holds every change made up
		// to this command: its own, and the ones it may have read.
		if err := s.jr.waitWritten(pos); err != nil {
			// The change is applied but not journaled: stop before the
			// reply leaves, as Redis does when it cannot write its AOF.
			// A restart replays what was journaled.
			s.fatal(err)
		}
	}
	return true
}

// run dispatches a client's command to miniredis, past the hook.
func (s *store) run(c *server.Peer, cmd string, args []string) {
	s.running.Store(c)
	s.srv.Dispatch(c, append([]string{cmd}, args...))
	s.running.Store(nil)
}

func (s *store) peer(c *server.Peer) *peerState {
	ps := s.peers[c]
	if ps == nil {
		ps = &peerState{}
		s.peers[c] = ps
		c.OnDisconnect(func() {
			s.mu.Lock()
			delete(s.peers, c)
			s.mu.Unlock()
		})
	}
	return ps
}

func (s *store) isRefused(cmd string) bool {
	r, ok := s.refused[cmd]
	if !ok {
		r = s.srv.IsRegisteredCommand(cmd) && !s.srv.IsReadOnlyCommand(cmd) && !passed[cmd]
		s.refused[cmd] = r
	}
	return r
}

func (s *store) add(into map[dbKey]*touch, db int) func(key string, l level, fields []string) {
	return func(key string, l level, fields []string) {
		k := dbKey{db, key}
		t := into[k]
		if t == nil {
			t = &touch{}
			into[k] = t
		}
		t.level = max(t.level, l)
		if l == touchFields {
			if t.fields == nil {
				t.fields = map[string]struct{}{}
			}
			for _, f := range fields {
				t.fields[f] = struct{}{}
			}
		}
	}
}

// outer runs a client's command under the lock and queues what it changed
// for the journal; it returns the journal position its reply waits for.
func (s *store) outer(c *server.Peer, cmd string, args []string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmdNow = s.now()
	ms := s.cmdNow.UnixMilli()
	s.recs = s.recs[:0]
	s.expireDue(ms)
	ps := s.peer(c)
	inTx := ps.tx != nil
	s.cur, s.curDB = nil, ps.db
	switch cmd {
	case "MULTI":
		s.run(c, cmd, args)
		if !inTx {
			ps.tx = map[dbKey]*touch{}
		}
	case "EXEC":
		s.cur, ps.tx = ps.tx, nil
		s.run(c, cmd, args)
		s.record()
	case "DISCARD":
		ps.tx = nil
		s.run(c, cmd, args)
	case "SELECT":
		if inTx {
			c.WriteError("ERR the embedded store does not take SELECT inside MULTI")
			break
		}
		s.run(c, cmd, args)
		if len(args) == 1 {
			if n, err := strconv.Atoi(args[0]); err == nil && n >= 0 && n < 1<<16 {
				ps.db = n
			}
		}
	case "TIME", "TTL", "PTTL":
		switch {
		case inTx:
			c.WriteError("ERR the embedded store answers " + cmd + " from the real clock, not inside MULTI")
		case cmd == "TIME":
			writeTime(c, s.cmdNow)
		case len(args) != 1:
			s.run(c, cmd, args) // miniredis's error
		default:
			writeTTL(c, cmd, s.expiryTime(dbKey{ps.db, args[0]}), ms)
		}
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT":
		if inTx {
			s.run(c, cmd, args) // queued: miniredis runs it at EXEC
			break
		}
		s.cur = map[dbKey]*touch{}
		s.scripting(c, cmd, args)
		s.record()
	case "SCAN":
		if inTx || !s.scan(c, ps.db, args) {
			s.run(c, cmd, args)
		}
	case "FLUSHALL", "FLUSHDB":
		if inTx {
			c.WriteError("ERR the embedded store does not take " + cmd + " inside MULTI")
			break
		}
		s.run(c, cmd, args)
		s.flushed(cmd == "FLUSHALL", ps.db)
	default:
		sp, write := journaled[cmd]
		if !write {
			if s.isRefused(cmd) {
				c.WriteError(refusal(cmd))
				break
			}
			s.run(c, cmd, args) // a read, or a script whose calls say what they touch
			s.record()
			break
		}
		if cmd == "COPY" && hasOption(args, "DB") {
			c.WriteError("ERR the embedded store does not COPY between databases")
			break
		}
		cmd, args, _ = absolute(ms, cmd, args)
		if inTx {
			touchKeys(sp, args, s.add(ps.tx, ps.db))
			s.run(c, cmd, args) // QUEUED
			break
		}
		s.cur = map[dbKey]*touch{}
		touchKeys(sp, args, s.add(s.cur, ps.db))
		s.run(c, cmd, args)
		s.record()
	}
	s.cur = nil
	s.writeFrame(ms)
	if s.jr == nil {
		return 0
	}
	return s.jr.position()
}

// nested handles a script's inner call: it runs on the goroutine that holds
// mu, inside miniredis's lock (so it may not call miniredis's direct API).
func (s *store) nested(c *server.Peer, cmd string, args []string) bool {
	switch cmd {
	case "TIME":
		writeTime(c, s.cmdNow)
		return true
	case "TTL", "PTTL":
		if len(args) != 1 {
			return false
		}
		if c == s.scriptPeer {
			v, err := s.call(s.curDB, "PEXPIRETIME", args[0])
			at, ok := asInt(v)
			if err != nil || !ok {
				c.WriteError(fmt.Sprintf("ERR the embedded store could not read the expiry of %q: %v", args[0], err))
				return true
			}
			writeTTL(c, cmd, at, s.cmdNow.UnixMilli())
			return true
		}
		// Its expiry time, read on a connection sharing the script's state.
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		aux := server.NewPeer(w)
		aux.Ctx = c.Ctx
		s.srv.Dispatch(aux, []string{"PEXPIRETIME", args[0]})
		w.Flush()
		v, err := server.ParseReply(bufio.NewReader(&buf))
		at, ok := asInt(v)
		if err != nil || !ok {
			c.WriteError(fmt.Sprintf("ERR the embedded store could not read the expiry of %q: %v", args[0], err))
			return true
		}
		writeTTL(c, cmd, at, s.cmdNow.UnixMilli())
		return true
	case "SELECT", "FLUSHALL", "FLUSHDB", "MULTI", "EXEC":
		c.WriteError("ERR the embedded store does not run " + cmd + " inside a script")
		return true
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT":
		c.WriteError("ERR This Redis command is not allowed from script")
		return true
	}
	sp, write := journaled[cmd]
	if !write {
		if s.isRefused(cmd) {
			c.WriteError(refusal(cmd))
			return true
		}
		return false
	}
	if cmd == "COPY" && hasOption(args, "DB") {
		c.WriteError("ERR the embedded store does not COPY between databases")
		return true
	}
	if s.cur == nil {
		s.cur = map[dbKey]*touch{}
	}
	cmd2, args2, changed := absolute(s.cmdNow.UnixMilli(), cmd, args)
	touchKeys(sp, args2, s.add(s.cur, s.curDB))
	if changed {
		s.srv.Dispatch(c, append([]string{cmd2}, args2...))
		return true
	}
	return false
}

// hasOption reports whether a command's options (after its two keys) hold opt.
func hasOption(args []string, opt string) bool {
	for i := 2; i < len(args); i++ {
		if strings.EqualFold(args[i], opt) {
			return true
		}
	}
	return false
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

// expiryTime is a key's PEXPIRETIME from the index: -2 missing, -1 none.
func (s *store) expiryTime(k dbKey) int64 {
	e := s.live[k]
	switch {
	case e == nil:
		return -2
	case e.at == 0:
		return -1
	}
	return e.at
}

// writeTTL answers TTL or PTTL for a key expiring at (PEXPIRETIME's value).
func writeTTL(c *server.Peer, cmd string, at, now int64) {
	if at < 0 {
		c.WriteInt(int(at))
		return
	}
	ms := max(at-now, 0)
	if cmd == "TTL" {
		c.WriteInt(int((ms + 500) / 1000))
		return
	}
	c.WriteInt(int(ms))
}

func writeTime(c *server.Peer, now time.Time) {
	us := now.UnixMicro()
	c.WriteLen(2)
	c.WriteBulk(strconv.FormatInt(us/1_000_000, 10))
	c.WriteBulk(strconv.FormatInt(us%1_000_000, 10))
}

// db is miniredis's database n.
func (s *store) db(n int) *miniredis.RedisDB {
	d := s.dbs[n]
	if d == nil {
		d = s.mr.DB(n)
		s.dbs[n] = d
	}
	return d
}

// call runs a command of the store's own, on database db.
func (s *store) call(db int, args ...string) (any, error) {
	if db != s.idb {
		if _, err := s.exec("SELECT", strconv.Itoa(db)); err != nil {
			return nil, err
		}
		s.idb = db
	}
	return s.exec(args...)
}

func (s *store) exec(args ...string) (any, error) {
	s.ibuf.Reset()
	s.srv.Dispatch(s.internal, args)
	if err := s.iw.Flush(); err != nil {
		return nil, err
	}
	s.ir.Reset(&s.ibuf)
	v, err := server.ParseReply(s.ir)
	if err != nil {
		return nil, err
	}
	if e, ok := v.(error); ok {
		return nil, e
	}
	return v, nil
}

// setLive notes that k lives with expiry at (0 none).
func (s *store) setLive(k dbKey, at int64) {
	e := s.live[k]
	if e == nil {
		e = &entry{key: k, idx: -1}
		s.live[k] = e
	}
	e.at = at
	switch {
	case at == 0 && e.idx >= 0:
		heap.Remove(&s.due, e.idx)
	case at != 0 && e.idx >= 0:
		heap.Fix(&s.due, e.idx)
	case at != 0:
		heap.Push(&s.due, e)
	}
}

func (s *store) forget(k dbKey) {
	if e := s.live[k]; e != nil {
		if e.idx >= 0 {
			heap.Remove(&s.due, e.idx)
		}
		delete(s.live, k)
	}
}

// expireDue deletes the keys whose expiry has passed (Redis: expired when
// now > at), journaling their deletion.
func (s *store) expireDue(now int64) {
	for len(s.due) > 0 && s.due[0].at < now {
		e := heap.Pop(&s.due).(*entry)
		delete(s.live, e.key)
		s.db(e.key.db).Del(e.key.key)
		s.recs = (&record{op: opDel, db: e.key.db, key: e.key.key}).append(s.recs)
		s.stats.Expired++
	}
}

// flushed forgets the keys FLUSHALL or FLUSHDB removed.
func (s *store) flushed(all bool, db int) {
	for k := range s.live {
		if all || k.db == db {
			s.forget(k)
		}
	}
	r := record{op: opFlushDB, db: db}
	if all {
		r.op = opFlushAll
	}
	s.recs = r.append(s.recs)
}

// record appends the new state of the keys the command touched.
func (s *store) record() {
	for k, t := range s.cur {
		s.recordKey(k, t)
	}
}

func (s *store) recordKey(k dbKey, t *touch) {
	d := s.db(k.db)
	typ := d.Type(k.key)
	prev := s.live[k]
	if typ == "" {
		if prev != nil {
			s.forget(k)
			s.recs = (&record{op: opDel, db: k.db, key: k.key}).append(s.recs)
		}
		return
	}
	at := expiryOf(d, k.key)
	prevAt := int64(0)
	if prev != nil {
		prevAt = prev.at
	}
	lv := t.level
	if prev == nil && lv == touchExpiry {
		lv = touchKey // not known before: write it whole
	}
	if lv == touchFields && typ != "hash" {
		lv = touchKey
	}
	switch lv {
	case touchKey:
		r, ok := s.image(d, k, typ, at)
		if !ok {
			return
		}
		s.recs = r.append(s.recs)
	case touchFields:
		r := record{op: opHashSet, db: k.db, key: k.key}
		del := record{op: opHashDel, db: k.db, key: k.key}
		for f := range t.fields {
			v := d.HGet(k.key, f)
			if v == "" && !s.hasField(k, f) {
				del.fields = append(del.fields, f)
				continue
			}
			r.fields = append(r.fields, f, v)
		}
		if len(r.fields) > 0 {
			s.recs = r.append(s.recs)
		}
		if len(del.fields) > 0 {
			s.recs = del.append(s.recs)
		}
		if at != prevAt {
			s.recs = (&record{op: opExpire, db: k.db, key: k.key, at: at}).append(s.recs)
		}
	case touchExpiry:
		if at != prevAt {
			s.recs = (&record{op: opExpire, db: k.db, key: k.key, at: at}).append(s.recs)
		}
	}
	s.setLive(k, at)
}

func (s *store) hasField(k dbKey, f string) bool {
	v, err := s.call(k.db, "HEXISTS", k.key, f)
	n, _ := asInt(v)
	return err == nil && n == 1
}

// expiryOf is a key's expiry in unix ms (0: none): its TTL, measured from
// the epoch miniredis's clock stands at.
func expiryOf(d *miniredis.RedisDB, key string) int64 {
	if ttl := d.TTL(key); ttl > 0 {
		return ttl.Milliseconds()
	}
	return 0
}

// image is the whole state of a key, as a record.
func (s *store) image(d *miniredis.RedisDB, k dbKey, typ string, at int64) (record, bool) {
	switch typ {
	case "string":
		v, err := d.Get(k.key)
		if err != nil {
			return record{}, false
		}
		return record{op: opString, db: k.db, key: k.key, value: v, at: at}, true
	case "hash":
		fields, err := d.HKeys(k.key)
		if err != nil || len(fields) == 0 {
			return record{}, false
		}
		r := record{op: opHash, db: k.db, key: k.key, at: at, fields: make([]string, 0, 2*len(fields))}
		for _, f := range fields {
			r.fields = append(r.fields, f, d.HGet(k.key, f))
		}
		return r, true
	}
	// The store refuses every write that makes another type.
	s.log.Error("embedded redis: a key of a type the journal does not keep; it is not saved", "key", k.key, "type", typ)
	return record{}, false
}

// writeFrame appends the records of the command under way to the journal.
func (s *store) writeFrame(ms int64) {
	if len(s.recs) == 0 || s.jr == nil {
		return
	}
	s.frame = appendFrame(s.frame[:0], ms, s.recs)
	s.jr.append(s.frame)
	s.maybeCompact()
}

// expireTick deletes due keys while no command comes.
func (s *store) expireTick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.due) == 0 {
		return
	}
	ms := s.now().UnixMilli()
	s.recs = s.recs[:0]
	s.expireDue(ms)
	s.writeFrame(ms)
}

// sync makes every write answered so far durable.
func (s *store) sync() error {
	if s.jr == nil {
		return ErrNotPersisted
	}
	return s.jr.sync()
}

// ErrNotPersisted: the embedded Redis runs without a data folder.
var ErrNotPersisted = errors.New("devservers: the embedded redis keeps its data in memory only")

// --- compaction ---

func (s *store) maybeCompact() {
	if s.busy || s.jr == nil {
		return
	}
	s.jr.mu.Lock()
	size := s.jr.size
	s.jr.mu.Unlock()
	if size < max(s.minSize, s.snapSize) {
		return
	}
	s.busy = true
	s.compact.Go(func() {
		if err := s.compactNow(); err != nil {
			s.log.Warn("embedded redis: writing a snapshot failed; the journal keeps everything and grows meanwhile", "err", err)
		}
	})
}

// compactNow writes a snapshot while commands go on, then removes the
// journal segments it covers. Called with busy set.
func (s *store) compactNow() error {
	s.mu.Lock()
	written := s.now()
	s.jr.mu.Lock()
	oldSize := s.jr.size
	s.jr.mu.Unlock()
	next, err := s.jr.rotate()
	if err != nil {
		s.busy = false
		s.mu.Unlock()
		s.fatal(err)
		return err
	}
	s.jr.mu.Lock()
	s.jr.size = int64(len(journalMagic) + 8)
	s.jr.mu.Unlock()
	keys := make([]dbKey, 0, len(s.live))
	for k := range s.live {
		keys = append(keys, k)
	}
	s.mu.Unlock()

	fail := func(err error) error {
		s.mu.Lock()
		s.busy = false
		s.jr.mu.Lock()
		s.jr.size += oldSize // the old segments stay in use
		s.jr.mu.Unlock()
		s.mu.Unlock()
		return err
	}
	w, err := newSnapshotWriter(s.dir, written, next)
	if err != nil {
		return fail(err)
	}
	for i := 0; i < len(keys); i += snapshotFrameN {
		s.mu.Lock()
		var recs []record
		for _, k := range keys[i:min(i+snapshotFrameN, len(keys))] {
			e := s.live[k]
			if e == nil {
				continue // deleted since: its deletion is in the new segment
			}
			d := s.db(k.db)
			if r, ok := s.image(d, k, d.Type(k.key), e.at); ok {
				recs = append(recs, r)
			}
		}
		s.mu.Unlock()
		for i := range recs {
			if err := w.add(&recs[i]); err != nil {
				w.abort()
				return fail(err)
			}
		}
	}
	size, err := w.commit()
	if err != nil {
		return fail(err)
	}
	segs, _ := segments(s.dir)
	for _, n := range segs {
		if n < next {
			os.Remove(filepath.Join(s.dir, segmentName(n)))
		}
	}
	s.mu.Lock()
	s.snapSize, s.busy = size, false
	s.stats.Compactions++
	s.mu.Unlock()
	return nil
}

// --- restore ---

// apply puts a record into miniredis (before it serves).
func (s *store) apply(r record) error {
	d := s.db(r.db)
	switch r.op {
	case opString:
		d.Del(r.key)
		if err := d.Set(r.key, r.value); err != nil {
			return err
		}
		if r.at != 0 {
			d.SetTTL(r.key, time.Duration(r.at)*time.Millisecond)
		}
	case opHash:
		d.Del(r.key)
		if len(r.fields) > 0 {
			d.HSet(r.key, r.fields...)
			if r.at != 0 {
				d.SetTTL(r.key, time.Duration(r.at)*time.Millisecond)
			}
		}
	case opDel:
		d.Del(r.key)
	case opHashSet:
		if t := d.Type(r.key); t != "" && t != "hash" {
			d.Del(r.key) // a later record gives it its type back (see journal.go)
		}
		d.HSet(r.key, r.fields...)
	case opHashDel:
		for _, f := range r.fields {
			d.HDel(r.key, f)
		}
		if fields, err := d.HKeys(r.key); err == nil && len(fields) == 0 {
			d.Del(r.key)
		}
	case opExpire:
		switch {
		case !d.Exists(r.key):
		case r.at == 0:
			if _, err := s.call(r.db, "PERSIST", r.key); err != nil {
				return err
			}
		default:
			d.SetTTL(r.key, time.Duration(r.at)*time.Millisecond)
		}
	case opFlushDB:
		d.FlushDB()
	case opFlushAll:
		s.mr.FlushAll()
	}
	return nil
}

// buildIndex reads every key's expiry once, after the restore.
func (s *store) buildIndex() {
	for n, d := range s.dbs {
		for _, k := range d.Keys() {
			s.setLive(dbKey{n, k}, expiryOf(d, k))
		}
	}
}

// close waits for a compaction under way and closes the journal.
func (s *store) close() error {
	s.compact.Wait()
	if s.jr == nil {
		return nil
	}
	return s.jr.close()
}
