package debounce

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
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

// respRecorder is a TCP server that speaks just enough RESP to record the
// commands a go-redis client sends, byte for byte: HELLO is refused (the
// client falls back to RESP2), every other command answered +OK.
type respRecorder struct {
	ln   net.Listener
	cmds chan [][]byte
}

func newRESPRecorder(t testing.TB) *respRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &respRecorder{ln: ln, cmds: make(chan [][]byte, 16)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(conn)
		}
	}()
	return r
}

func (r *respRecorder) serve(conn net.Conn) {
	defer conn.Close()
	rd := bufio.NewReader(conn)
	line := func() (string, error) {
		s, err := rd.ReadString('\n')
		return strings.TrimSuffix(s, "\r\n"), err
	}
	for {
		h, err := line()
		if err != nil || !strings.HasPrefix(h, "*") {
			return
		}
		n, _ := strconv.Atoi(h[1:])
		args := make([][]byte, n)
		for i := range args {
			l, err := line()
			if err != nil || !strings.HasPrefix(l, "$") {
				return
			}
			size, _ := strconv.Atoi(l[1:])
			b := make([]byte, size+2)
			if _, err := io.ReadFull(rd, b); err != nil {
				return
			}
			args[i] = b[:size]
		}
		if strings.EqualFold(string(args[0]), "hello") {
			conn.Write([]byte("-ERR unknown command 'HELLO'\r\n"))
			continue
		}
		r.cmds <- args
		conn.Write([]byte("+OK\r\n"))
	}
}

// FuzzCallArgsWire: a decision's call written through evalSha with its
// arguments from a callArgs (keys by reference) is the same command, byte
// for byte, as go-redis's own Script.EvalSha with the values boxed.
func FuzzCallArgsWire(f *testing.F) {
	f.Add(int64(1_796_656_532_243), uint64(8290281888981298547), []byte(`{"tenant_id":"t-1"}`), "k:{x}", int64(-3))
	f.Add(int64(0), uint64(0), []byte{}, "", int64(255))
	f.Add(int64(256), uint64(1<<63), []byte("\x00\r\n$3\r\n"), "a\r\nb", int64(-1<<63))
	f.Add(int64(-257), uint64(1<<64-1), []byte(nil), "{tag}"+strings.Repeat("k", 300), int64(1<<63-1))
	rec := newRESPRecorder(f)
	rdb := redis.NewClient(&redis.Options{Addr: rec.ln.Addr().String(), DisableIdentity: true, MaxRetries: -1, PoolSize: 1})
	f.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	script := joinRoundScript
	f.Fuzz(func(t *testing.T, n int64, u uint64, data []byte, key string, m int64) {
		keys := []string{key, key + "due"}
		script.EvalSha(ctx, rdb, keys, n, u, data, "s", m, []byte(key))
		want := <-rec.cmds
		for _, a := range []*callArgs{newPackedCall(), &newJoinCall().callArgs, &newRoundCall().callArgs} {
			args := []any{a.int(n), a.uint(u), a.bytes(data), "s", a.int(m), a.bytes([]byte(key))}
			evalSha(ctx, rdb, script, true, keys, args)
			got := <-rec.cmds
			if len(got) != len(want) {
				t.Fatalf("%d arguments sent, go-redis sends %d: %q vs %q", len(got), len(want), got, want)
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("argument %d: %q, go-redis sends %q", i, got[i], want[i])
				}
			}
		}
	})
}

// FuzzSetXXWire: a payload key's SET XX built in one allocation
// (newSetXX, by reference or as text) sends what go-redis's own SET key
// value XX KEEPTTL sends, byte for byte, alone and in a pipeline.
func FuzzSetXXWire(f *testing.F) {
	f.Add([]byte(`{"tenant_id":"t-1","seq":2}`), "b{k}a8290281888981298547")
	f.Add([]byte{}, "")
	f.Add([]byte("\x00\r\n$3\r\n"), "a\r\nb")
	f.Add([]byte(nil), "{tag}"+strings.Repeat("k", 300))
	rec := newRESPRecorder(f)
	rdb := redis.NewClient(&redis.Options{Addr: rec.ln.Addr().String(), DisableIdentity: true, MaxRetries: -1, PoolSize: 1})
	f.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		rdb.Do(ctx, "set", key, data, "xx", "keepttl")
		want := <-rec.cmds
		for _, byRef := range []bool{true, false} {
			sc := newSetXX(key, data, byRef)
			plainSetXX.Run(ctx, rdb, sc.keys[:], sc.self[:]...)
			pipe := rdb.Pipeline()
			plainSetXX.queue(ctx, pipe, sc.keys[:], sc.self[:])
			_, _ = pipe.Exec(ctx)
			for _, how := range []string{"alone", "in a pipeline"} {
				got := <-rec.cmds
				if len(got) != len(want) {
					t.Fatalf("by reference %v, %s: %d arguments sent, go-redis sends %d: %q vs %q", byRef, how, len(got), len(want), got, want)
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Errorf("by reference %v, %s: argument %d: %q, go-redis sends %q", byRef, how, i, got[i], want[i])
					}
				}
			}
		}
	})
}
