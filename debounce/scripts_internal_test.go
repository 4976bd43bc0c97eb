package debounce

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestScriptConstantsMatchTheLayout: the packed layout's constants are
// written out in the Lua scripts (Lua has no shared module); each must be
// the value layout.go uses, or a script would read another bit than Go
// writes. Every `local NAME[, NAME] = N[, N]` of a known name is checked,
// and so is every bare use of their values and of the count modulus.
func TestScriptConstantsMatchTheLayout(t *testing.T) {
	want := map[string]int64{
		"RND":    1 << packRndShift,
		"PUB":    packPub,
		"CNT":    packCnt,
		"MAXCNT": packMaxCount,
	}
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	decl := regexp.MustCompile(`(?m)^local ([A-Z][A-Z, ]*?)\s*=\s*([0-9][0-9, ]*)`)
	checked := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			names, values := strings.Split(m[1], ","), strings.Split(m[2], ",")
			if len(names) != len(values) {
				t.Errorf("%s: %q: names and values differ in number", f, m[0])
				continue
			}
			for i, name := range names {
				name = strings.TrimSpace(name)
				w, known := want[name]
				if !known {
					continue
				}
				got, err := strconv.ParseInt(strings.TrimSpace(values[i]), 10, 64)
				if err != nil || got != w {
					t.Errorf("%s: %s = %s, layout.go has %d", f, name, strings.TrimSpace(values[i]), w)
				}
				checked++
			}
		}
		// The count field's modulus (2^22) and the seen encoding's bounds
		// appear as literals in expressions.
		for lit, w := range map[string]int64{"4194304": packMaxCount + 1, "2048": seenExact, "65535": packMaxSeen} {
			if strings.Contains(string(src), lit) {
				if n, _ := strconv.ParseInt(lit, 10, 64); n != w {
					t.Errorf("%s uses %s where layout.go has %d", f, lit, w)
				}
				checked++
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d constants found in the scripts: the pattern no longer matches them", checked)
	}
}

// TestScriptStatuses: the scripts that close a round, and the two that open
// rounds, declare their statuses as locals of one list with the Go
// constants' values (close*, status*), and return no bare number as a
// status.
func TestScriptStatuses(t *testing.T) {
	closing := map[string]int{
		"STALE": closeStale, "MISSING": closeMissing, "CLOSED": closeClosed, "NOT_DUE": closeNotDue,
		"KEPT": closeKept, "SHARED": closeShared, "RETRY": closeRetry, "SUPERSEDED": closeSuperseded, "DONE": closeDone,
	}
	opening := map[string]int{
		"JOINED": statusJoined, "OPENED": statusOpened, "LEADING": statusLeading, "THROTTLED": statusThrottled, "EXTENDED": statusExtended,
	}
	forwarding := map[string]int{"GONE": forwardGone, "WAIT": forwardWait, "PACKED": forwardPacked, "HASH": forwardHash}
	decl := regexp.MustCompile(`(?m)^local ((?:[A-Z_]+, )*[A-Z_]+) = ((?:-?[0-9]+, )*-?[0-9]+)$`)
	bare := regexp.MustCompile(`return \{-?[0-9]`)
	for f, want := range map[string]map[string]int{
		"scripts/release_packed.lua": closing, "scripts/take_round.lua": closing,
		"scripts/open_packed.lua": opening, "scripts/open_round.lua": opening, "scripts/join_round.lua": opening, "scripts/open_held_many.lua": opening,
		"scripts/idempotent.lua":   {"REUSED": idemReused, "FRESH": idemFresh, "REPLAYED": idemReplayed},
		"scripts/forward_take.lua": forwarding,
	} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			names, values := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
			for i, name := range names {
				if _, ok := want[name]; ok && i < len(values) {
					got[name], _ = strconv.Atoi(values[i])
				}
			}
		}
		for name, w := range want {
			if g, ok := got[name]; !ok || g != w {
				t.Errorf("%s: %s = %d (declared %v), Go has %d", f, name, g, ok, w)
			}
		}
		if loc := bare.FindIndex(src); loc != nil {
			t.Errorf("%s returns a bare status: %q", f, src[loc[0]:min(loc[1]+20, len(src))])
		}
	}
}

// TestScriptsNameTheirArguments: every script reads ARGV only in local
// declarations at its top, before any code, so its body uses names, not
// positions; and every ARGV[i] its header documents is the one it reads,
// with none skipped.
func TestScriptsNameTheirArguments(t *testing.T) {
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	decl := regexp.MustCompile(`^local [a-z_]+(, [a-z_]+)* = .*ARGV\[`)
	arg := regexp.MustCompile(`ARGV\[(\d+)\]`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		documented, read := map[string]bool{}, map[string]bool{}
		code := false // past the declarations
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "--") {
				for _, m := range arg.FindAllStringSubmatch(line, -1) {
					documented[m[1]] = true
				}
				continue
			}
			ms := arg.FindAllStringSubmatch(line, -1)
			switch {
			case len(ms) > 0 && (code || !decl.MatchString(line)):
				t.Errorf("%s:%d reads ARGV outside the declarations at the top: %s", f, i+1, line)
			case len(ms) == 0 && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "local "):
				code = true
			}
			for _, m := range ms {
				read[m[1]] = true
			}
		}
		for n := range documented {
			if !read[n] {
				t.Errorf("%s documents ARGV[%s] but never reads it", f, n)
			}
		}
		for n := range read {
			if !documented[n] {
				t.Errorf("%s reads ARGV[%s], which its header does not document", f, n)
			}
		}
	}
}

// TestScriptsGetTheirShared: the scripts composed from several files have
// each part in place (scripts/seen.lua, join_tail.lua, join_fields.lua): a marker left in a
// script would be a Lua comment, and its call of the part a runtime error.
func TestScriptsGetTheirShared(t *testing.T) {
	for name, lua := range map[string]string{
		"open_packed": openPackedLua, "flush_packed": withSeen(flushPackedLua), "open_held_many": withSeen(openHeldManyLua),
		"idempotent(open_packed)": wrapIdempotent(openPackedLua), "join_many": strings.Replace(joinManyLua, "--JOIN--", joinTailLua, 1),
		"open_round": withSeen(openRoundLua), "idempotent(open_round)": wrapIdempotent(withSeen(openRoundLua) + joinTailLua),
		"join_round": joinRoundLua + joinTailLua,
	} {
		for _, marker := range []string{"--SEEN--", "--JOIN--", "--DECIDE--", "--FIELDS--"} {
			if strings.Contains(lua, marker) {
				t.Errorf("%s still has its %s marker", name, marker)
			}
		}
		if (strings.Contains(lua, "seen(") || strings.Contains(lua, "packed_join(")) && !strings.Contains(lua, "local function packed_join(") {
			t.Errorf("%s calls seen or packed_join but has not got them", name)
		}
		if strings.Contains(lua, "f[7]") && !strings.Contains(lua, "f = redis.call('HMGET', key,") {
			t.Errorf("%s reads a round's fields it has not got", name)
		}
	}
}
