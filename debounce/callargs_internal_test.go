package debounce

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestCallArgsText: every argument a callArgs gives is the text strconv
// writes for it (or the bytes themselves), whether its text fitted the
// struct or not, and however many references it already gave; hooks and
// errors see the same text (fmt.Stringer).
func TestCallArgsText(t *testing.T) {
	text := func(v any) string {
		t.Helper()
		switch v := v.(type) {
		case nil:
			return ""
		case int64:
			return strconv.FormatInt(v, 10)
		case uint64:
			return strconv.FormatUint(v, 10)
		case []byte:
			return string(v)
		case fmt.Stringer:
			return v.String()
		}
		t.Fatalf("argument of type %T", v)
		return ""
	}
	for _, a := range []*callArgs{newPackedCall(), &newRoundCall().callArgs, &newJoinCall().callArgs} {
		testCallArgsText(t, a, text)
	}
	key := "k:{x}"
	if s := (*strRef)(&key).String(); s != key {
		t.Errorf("strRef text %q", s)
	}
	if b, _ := (*strRef)(&key).MarshalBinary(); string(b) != key {
		t.Errorf("strRef bytes %q", b)
	}
}

func testCallArgsText(t *testing.T, a *callArgs, text func(any) string) {
	var want []string
	var got []any
	// Enough numbers to fill text and refs and go past both.
	for i := range 40 {
		n := int64(i) * 1_000_003_007
		got = append(got, a.int(n), a.int(-n), a.uint(uint64(n)*7))
		want = append(want, strconv.FormatInt(n, 10), strconv.FormatInt(-n, 10), strconv.FormatUint(uint64(n)*7, 10))
	}
	got = append(got, a.int(math.MaxInt64), a.uint(math.MaxUint64), a.int(math.MinInt64), a.int(255), a.uint(0))
	want = append(want, "9223372036854775807", "18446744073709551615", "-9223372036854775808", "255", "0")
	got = append(got, a.bytes(nil), a.bytes([]byte{}), a.bytes([]byte(`{"a":1}`)))
	want = append(want, "", "", `{"a":1}`)
	for i := range got {
		if s := text(got[i]); s != want[i] {
			t.Errorf("argument %d: %q, want %q", i, s, want[i])
		}
	}
	if len(a.refs) != cap(a.refs) || len(a.text) < cap(a.text)-20 {
		t.Errorf("the test did not fill the struct: %d refs of %d, %d bytes of text of %d", len(a.refs), cap(a.refs), len(a.text), cap(a.text))
	}
}

// TestScriptCallsSendTheirArguments: a script run through evalSha (plain
// client, keys by reference), in a pipeline and alone (runScript, after a
// SCRIPT FLUSH: NOSCRIPT, then EVAL), and on a Cluster (keys as text, to
// route), receives exactly the keys and arguments it was given.
func TestScriptCallsSendTheirArguments(t *testing.T) {
	echo := redis.NewScript(`local out = {} for i, k in ipairs(KEYS) do out[#out+1] = 'K' .. k end for i, v in ipairs(ARGV) do out[#out+1] = 'A' .. v end return table.concat(out, '|')`)
	args := func(a *callArgs) ([]any, string) {
		v := []any{a.int(1_796_656_532_243), a.uint(8290281888981298547), a.int(7), a.bytes([]byte(`{"tenant_id":"t-1"}`)), a.bytes(nil), "s", int64(-3)}
		return v, `A1796656532243|A8290281888981298547|A7|A{"tenant_id":"t-1"}|A|As|A-3`
	}
	check := func(t *testing.T, cmd *redis.Cmd, keys []string, want string) {
		t.Helper()
		got, err := cmd.Text()
		if err != nil {
			t.Fatal(err)
		}
		if w := "K" + strings.Join(keys, "|K") + "|" + want; got != w {
			t.Errorf("script received %q, want %q", got, w)
		}
		if s := cmd.String(); !strings.Contains(s, keys[0]) || !strings.Contains(s, "1796656532243") {
			t.Errorf("the command's text (hooks, errors) %q lacks its key or arguments", s)
		}
	}
	ctx := context.Background()
	t.Run("plain", func(t *testing.T) {
		srv := testenv.SharedRedis(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
		defer rdb.Close()
		keys := []string{testenv.Prefix(t) + "a{x}", testenv.Prefix(t) + "b{x}"}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		v, want := args(newPackedCall())
		cmd := runScript(ctx, rdb, echo, keys, v) // NOSCRIPT, then EVAL
		check(t, cmd, keys, want)
		v, want = args(&newRoundCall().callArgs)
		pipe := rdb.Pipeline()
		cmd = evalSha(ctx, pipe, echo, true, keys, v)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, cmd, keys, want)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testenv.SharedCluster(t)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
		defer rdb.Close()
		// Keys of several slots, one call each: each must reach its own
		// shard (a wrong route answers MOVED).
		for i := range 8 {
			keys := []string{fmt.Sprintf("%sk{%d}", testenv.Prefix(t), i)}
			v, want := args(newPackedCall())
			check(t, runScript(ctx, rdb, echo, keys, v), keys, want)
		}
	})
}
