package outbox_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/outbox"
)

// FuzzCheck: Check never panics, refuses only with a *FieldError naming a
// field of the event, and accepts nothing a Coalescer would refuse as bad
// args (the relay would move such a row aside).
func FuzzCheck(f *testing.F) {
	for _, s := range []struct{ typ, args, key, tp string }{
		{"sync_orders", `{"tenant_id":1,"order_id":2}`, "", ""},
		{"sync_orders", `{"tenant_id":9007199254740993}`, "", ""},
		{"sync_orders", `{"a":1,"a":2}`, "k", ""},
		{"bad type", `{}`, "", ""},
		{"t", `[1e400]`, "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"t", "\"\xff\"", "", "nope"},
	} {
		f.Add(s.typ, []byte(s.args), s.key, s.tp)
	}
	co, err := debounce.New(debounce.Config{Redis: nopRedis(), Policies: []debounce.Policy{{Type: "t", Mode: debounce.ModeDedup}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, typ string, args []byte, key, tp string) {
		ev := debounce.Event{Type: typ, Args: args, Key: key, TraceParent: tp}
		err := outbox.Check(ev)
		if err != nil {
			var fe *outbox.FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Msg == "" {
				t.Fatalf("Check(%q, %q): %v is not a *FieldError naming a field", typ, args, err)
			}
			return
		}
		ev.Type = "t" // a type with a policy: only args, key and traceparent can fail
		if _, err := co.RoundKeyOf(ev); err != nil {
			t.Fatalf("Check accepted args %q key %q traceparent %q, which the Coalescer refuses: %v", args, key, tp, err)
		}
	})
}

// nopRedis is a client never used: RoundKeyOf touches no server.
func nopRedis() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DisableIdentity: true})
}
