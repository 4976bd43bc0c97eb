package devservers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/devservers"
	"github.com/coalesce-io/coalesce/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// reply renders a result or an error's class (the first word: Redis and
// the store word the rest differently).
func reply(v any, err error) string {
	if err != nil {
		if err == redis.Nil {
			return "nil"
		}
		class, _, _ := strings.Cut(err.Error(), " ")
		return "error " + class
	}
	return fmt.Sprintf("%#v", v)
}

// TestScriptsAsRedisRunsThem: the store runs scripts itself (one compiled
// state per script instead of miniredis's new state per call); each script
// here gives the same reply on it as on redis-server, and the same keys
// after, run twice (the kept state must not carry anything over).
func TestScriptsAsRedisRunsThem(t *testing.T) {
	t.Parallel()
	real := testenv.NewRedis(t).Client(t)
	s := start(t, devservers.Options{RedisDir: t.TempDir()})
	defer s.Close()
	emb := client(t, s)
	ctx := context.Background()
	cases := []struct {
		name, src string
		keys      []string
		args      []any
	}{
		{"types", `return {1, 2.9, -3.5, "s", true, false, nil, "after nil"}`, nil, nil},
		{"nested and empty", `return {{1, {"a"}}, {}}`, nil, nil},
		{"status and error", `return {redis.status_reply("FINE"), 1}`, nil, nil},
		{"status", `return redis.status_reply("FINE")`, nil, nil},
		{"error reply", `return redis.error_reply("MYERR something")`, nil, nil},
		{"error reply without code", `return redis.error_reply("plain")`, nil, nil},
		{"call raises", `redis.call('SET', KEYS[1], 'v'); return redis.call('HGET', KEYS[1], 'f')`, []string{"s1"}, nil},
		{"pcall returns", `redis.call('SET', KEYS[1], 'v'); local r = redis.pcall('HGET', KEYS[1], 'f'); return type(r) == 'table' and r.err ~= nil`, []string{"s2"}, nil},
		{"replies to lua", `redis.call('HSET', KEYS[1], 'a', '1'); local ok = redis.call('SET', KEYS[2], 'x');
			return {ok.ok, redis.call('GET', 'missing') == false, redis.call('HGETALL', KEYS[1]), redis.call('INCRBY', KEYS[3], 5)}`, []string{"h", "s3", "n"}, nil},
		{"keys and argv", `return {#KEYS, #ARGV, KEYS[2], ARGV[3]}`, []string{"a", "b"}, []any{1, "two", 3.5}},
		{"numbers as args", `return redis.call('INCRBY', KEYS[1], tonumber(ARGV[1]) * 2)`, []string{"n2"}, []any{21}},
		{"cjson", `return cjson.encode({a = cjson.decode(ARGV[1]).x})`, nil, []any{`{"x":[1,2]}`}},
		{"global refused", `x = 1; return x`, nil, nil},
		{"unknown global", `return undefined_thing`, nil, nil},
		{"runtime error", `return nil + 1`, nil, nil},
		{"sha1hex", `return redis.sha1hex("abc")`, nil, nil},
		{"ttl inside", `redis.call('SET', KEYS[1], 'v', 'PX', 60000); local t = redis.call('PTTL', KEYS[1]); return t > 59000 and t <= 60000`, []string{"t1"}, nil},
		{"expire then exists", `redis.call('SET', KEYS[1], 'v'); redis.call('PEXPIRE', KEYS[1], 0); return redis.call('EXISTS', KEYS[1])`, []string{"t2"}, nil},
		{"eval inside refused", `return redis.call('EVAL', 'return 1', 0)`, nil, nil},
	}
	for _, c := range cases {
		for round := range 2 {
			want := reply(real.Eval(ctx, c.src, c.keys, c.args...).Result())
			got := reply(emb.Eval(ctx, c.src, c.keys, c.args...).Result())
			if got != want {
				t.Errorf("%s (run %d): embedded %s, redis %s", c.name, round+1, got, want)
			}
			sha := devservers.ScriptSHA(c.src)
			want = reply(real.EvalSha(ctx, sha, c.keys, c.args...).Result())
			got = reply(emb.EvalSha(ctx, sha, c.keys, c.args...).Result())
			if got != want {
				t.Errorf("%s by EVALSHA (run %d): embedded %s, redis %s", c.name, round+1, got, want)
			}
		}
	}
	for _, k := range []string{"s1", "s2", "h", "s3", "n", "n2", "t2"} {
		if w, g := reply(real.Dump(ctx, k).Result()) != "nil", reply(emb.Exists(ctx, k).Result()) == "1"; w != g {
			t.Errorf("key %s: exists on redis %v, on the store %v", k, w, g)
		}
	}
	if h := emb.HGetAll(ctx, "h").Val(); h["a"] != "1" || emb.Get(ctx, "n").Val() != "20" { // INCRBY 5, four times
		t.Errorf("after the scripts: h %v, n %q", h, emb.Get(ctx, "n").Val())
	}
	// The script cache: EXISTS, FLUSH, NOSCRIPT, read-only scripts.
	sha, err := emb.ScriptLoad(ctx, `return 7`).Result()
	if err != nil || sha != devservers.ScriptSHA(`return 7`) {
		t.Fatalf("SCRIPT LOAD: %s %v", sha, err)
	}
	if ex := emb.ScriptExists(ctx, sha, "0000000000000000000000000000000000000000").Val(); len(ex) != 2 || !ex[0] || ex[1] {
		t.Errorf("SCRIPT EXISTS: %v", ex)
	}
	emb.ScriptFlush(ctx)
	if err := emb.EvalSha(ctx, sha, nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Errorf("EVALSHA after SCRIPT FLUSH: %v", err)
	}
	for _, db := range []*redis.Client{real, emb} {
		if err := db.EvalRO(ctx, `return redis.call('SET', 'ro', 'x')`, nil).Err(); err == nil {
			t.Error("a write from EVAL_RO ran")
		}
	}
}

// TestScanPagesAsRedis: SCAN goes page by page over the store's index
// (miniredis returned every key in one reply, under the store's lock); the
// keys it returns for a pattern are those redis-server's KEYS returns, and a
// key deleted or added during the scan does not disturb the others.
func TestScanPagesAsRedis(t *testing.T) {
	t.Parallel()
	real := testenv.NewRedis(t).Client(t)
	s := start(t, devservers.Options{RedisDir: t.TempDir()})
	defer s.Close()
	emb := client(t, s)
	ctx := context.Background()
	var keys []string
	for i := range 2500 {
		keys = append(keys, fmt.Sprintf("co{t%d}:r%d", i%37, i), fmt.Sprintf("other:%d", i))
	}
	keys = append(keys, "a*b", "a?b", "a[b", "ab", "a\\b", "x-y", "[]")
	for _, db := range []*redis.Client{real, emb} {
		p := db.Pipeline()
		for _, k := range keys {
			p.Set(ctx, k, "v", 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scanAll := func(pattern string, count int64, during func()) map[string]bool {
		got := map[string]bool{}
		var cursor uint64
		for pages := 0; ; pages++ {
			ks, next, err := emb.Scan(ctx, cursor, pattern, count).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range ks {
				got[k] = true
			}
			if pages == 2 && during != nil {
				during()
			}
			if cursor = next; cursor == 0 {
				return got
			}
			if pages > 10000 {
				t.Fatal("SCAN does not end")
			}
		}
	}
	for _, pattern := range []string{"*", "co{t3}:*", "co{t1?}:r*", "other:1*", "a\\*b", "a?b", "a[*]b", "a[^b]b", "a[a-c]*", "x[a-]y", "a\\\\b", "[[]*", "*:r2[0-4]9"} {
		want, err := real.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		got := scanAll(pattern, 100, nil)
		if len(got) != len(want) {
			t.Errorf("SCAN MATCH %q: %d keys, redis KEYS %d", pattern, len(got), len(want))
		}
		for _, k := range want {
			if !got[k] {
				t.Errorf("SCAN MATCH %q misses %q", pattern, k)
				break
			}
		}
	}
	// Changes during a scan: the keys present throughout all come back.
	got := scanAll("co{*", 200, func() {
		emb.Del(ctx, "co{t0}:r0", "co{t1}:r1")
		emb.Set(ctx, "co{new}:x", "v", 0)
	})
	for _, k := range keys {
		if strings.HasPrefix(k, "co{") && k != "co{t0}:r0" && k != "co{t1}:r1" && !got[k] {
			t.Fatalf("a key present throughout the scan was not returned: %s", k)
		}
	}
	if got["co{t0}:r0"] && emb.Exists(ctx, "co{t0}:r0").Val() == 1 {
		t.Error("a deleted key still exists")
	}
	// TYPE, and a cursor that is not one.
	emb.HSet(ctx, "co{h}:1", "f", "v")
	if ks := scanAll("co{*", 1000, nil); !ks["co{h}:1"] {
		t.Error("the hash is not scanned")
	}
	if ks, next, err := emb.ScanType(ctx, 0, "co{*", 100000, "hash").Result(); err != nil || next != 0 || len(ks) != 1 || ks[0] != "co{h}:1" {
		t.Errorf("SCAN TYPE hash: %v %d %v", ks, next, err)
	}
	if ks, next, err := emb.Scan(ctx, 12345, "*", 10).Result(); err != nil || next != 0 || len(ks) != 0 {
		t.Errorf("SCAN of an unknown cursor: %v %d %v", ks, next, err)
	}
}
