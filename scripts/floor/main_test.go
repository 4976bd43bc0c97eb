package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Every mode writes each event, and what a key holds at the end is its
// last event's args: the yardstick does the work it claims to measure.
func TestFloorModesWriteEveryEvent(t *testing.T) {
	srv := testenv.SharedRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	const events, keys = 300, 7
	for _, mode := range modes {
		for _, conc := range []int{1, 8} {
			prefix := fmt.Sprintf("%s%s-%d:", testenv.Prefix(t), mode, conc)
			var out bytes.Buffer
			err := run([]string{"-addr", srv.Addr, "-mode", mode, "-concurrency", fmt.Sprint(conc),
				"-events", fmt.Sprint(events), "-keys", fmt.Sprint(keys), "-prefix", prefix}, &out)
			if err != nil {
				t.Fatalf("%s, %d in flight: %v", mode, conc, err)
			}
			var res struct {
				Mode      string  `json:"mode"`
				Events    int     `json:"events"`
				Errors    int     `json:"errors"`
				PerSecond float64 `json:"events_per_s"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("%s: output %q: %v", mode, out.String(), err)
			}
			if res.Mode != mode || res.Events != events || res.Errors != 0 || res.PerSecond <= 0 {
				t.Fatalf("%s, %d in flight: %+v", mode, conc, res)
			}
			// With 8 callers the order of a key's events is not fixed:
			// its value is one of its events' args. With 1, its last.
			for key := range keys {
				name := fmt.Sprintf("%stenant-%d", prefix, key)
				var got string
				if strings.HasPrefix(mode, "set-") {
					got, err = rdb.Get(ctx, name).Result()
				} else {
					got, err = rdb.HGet(ctx, name, "a").Result()
				}
				if err != nil {
					t.Fatalf("%s: key %s: %v", mode, name, err)
				}
				var args struct {
					Tenant string `json:"tenant_id"`
					Seq    int    `json:"seq"`
				}
				if err := json.Unmarshal([]byte(got), &args); err != nil {
					t.Fatalf("%s: key %s holds %q: %v", mode, name, got, err)
				}
				last := key + (events-1-key)/keys*keys
				if args.Tenant != fmt.Sprintf("tenant-%d", key) || args.Seq%keys != key ||
					conc == 1 && args.Seq != last || args.Seq > last || args.Seq < last-conc*keys {
					t.Fatalf("%s, %d in flight: key %s holds %q, want the args of event %d", mode, conc, name, got, last)
				}
			}
		}
	}
}

func TestFloorRefusesBadFlags(t *testing.T) {
	for _, argv := range [][]string{{"-mode", "nope"}, {"-concurrency", "0"}, {"-events", "-1"}} {
		if err := run(argv, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", argv)
		}
	}
}
