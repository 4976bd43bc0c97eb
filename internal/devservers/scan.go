package devservers

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2/server"
)

// SCAN, paged. miniredis answers a SCAN with every matching key at once
// (sorting the keyspace twice and matching each key, under the store's
// lock): with 200,000 rounds the reaper's pass every minute held every
// other command up. Here a SCAN at cursor 0 copies the list of the
// database's keys from the store's index (no sort), and each call looks at
// COUNT of them (default 10, as Redis), so other commands run between the
// pages. As Redis: a key present from the first call to the last is
// returned; one added or removed meanwhile may be or not.

const maxScans = 64 // cursors kept at once; the least recently used goes

type scanState struct {
	db   int
	keys []string
	pos  int
	used time.Time
}

// scan answers SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]; false
// leaves a malformed one to miniredis (and its error).
func (s *store) scan(c *server.Peer, db int, args []string) bool {
	if len(args) == 0 {
		return false
	}
	cursor, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return false
	}
	pattern, typ, count := "*", "", 10
	for i := 1; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return false
		}
		switch strings.ToUpper(args[i]) {
		case "MATCH":
			pattern = args[i+1]
		case "COUNT":
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n < 1 {
				return false
			}
			count = n
		case "TYPE":
			typ = strings.ToLower(args[i+1])
		default:
			return false
		}
	}
	if s.scans == nil {
		s.scans = map[uint64]*scanState{}
	}
	st := s.scans[cursor]
	switch {
	case cursor == 0:
		st = &scanState{db: db}
		for k := range s.live {
			if k.db == db {
				st.keys = append(st.keys, k.key)
			}
		}
		for cursor == 0 || s.scans[cursor] != nil {
			cursor = rand.Uint64() >> 1
		}
		s.keepScan(cursor, st)
	case st == nil || st.db != db:
		// Unknown (finished, dropped, another database's): nothing more.
		c.WriteLen(2)
		c.WriteBulk("0")
		c.WriteLen(0)
		return true
	}
	st.used = s.cmdNow
	var out []string
	d := s.db(db)
	end := min(st.pos+count, len(st.keys))
	for _, k := range st.keys[st.pos:end] {
		if s.live[dbKey{db, k}] == nil || !globMatch(pattern, k) || (typ != "" && d.Type(k) != typ) {
			continue
		}
		out = append(out, k)
	}
	st.pos = end
	next := strconv.FormatUint(cursor, 10)
	if st.pos >= len(st.keys) {
		delete(s.scans, cursor)
		next = "0"
	}
	c.WriteLen(2)
	c.WriteBulk(next)
	c.WriteLen(len(out))
	for _, k := range out {
		c.WriteBulk(k)
	}
	return true
}

func (s *store) keepScan(cursor uint64, st *scanState) {
	if len(s.scans) >= maxScans {
		var oldest uint64
		for id, o := range s.scans {
			if oldest == 0 || o.used.Before(s.scans[oldest].used) {
				oldest = id
			}
		}
		delete(s.scans, oldest)
	}
	st.used = s.cmdNow
	s.scans[cursor] = st
}

// globMatch is Redis's pattern match: * any run, ? one byte, [abc] [a-z]
// [^a] a class, \x the byte x. Iterative, backtracking to the last * only:
// O(len(pattern) * len(s)) whatever the pattern.
func globMatch(pattern, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0 // the pattern after the last *, and where s was then
	for si < len(s) {
		if pi < len(pattern) && pattern[pi] == '*' {
			for pi < len(pattern) && pattern[pi] == '*' {
				pi++
			}
			star, mark = pi, si
			continue
		}
		if pi < len(pattern) {
			if n, ok := matchOne(pattern[pi:], s[si]); ok {
				pi, si = pi+n, si+1
				continue
			}
		}
		if star < 0 {
			return false
		}
		mark++
		pi, si = star, mark
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}

// matchOne matches one byte c against the pattern's first element (not *):
// how many pattern bytes it takes, and whether c matches.
func matchOne(p string, c byte) (int, bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '\\':
		if len(p) > 1 {
			return 2, p[1] == c
		}
		return 1, c == '\\'
	case '[':
		i := 1
		not := i < len(p) && p[i] == '^'
		if not {
			i++
		}
		match := false
		for i < len(p) && p[i] != ']' {
			switch {
			case p[i] == '\\' && i+1 < len(p):
				match = match || p[i+1] == c
				i += 2
			case i+2 < len(p) && p[i+1] == '-': // as Redis, even "a-]"
				lo, hi := p[i], p[i+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				match = match || (c >= lo && c <= hi)
				i += 3
			default:
				match = match || p[i] == c
				i++
			}
		}
		if i < len(p) {
			i++ // the ]; without one Redis takes the rest as the class
		}
		return i, match != not
	}
	return 1, p[0] == c
}
