package debounce_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/debounce"
)

func TestPolicyValidation(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name   string
		p      debounce.Policy
		field  string // "" means valid
		msgHas string
	}{
		{"debounce", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 30 * s}, "", ""},
		{"debounce extend", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 30 * s, Extend: true, MaxWait: 5 * time.Minute}, "", ""},
		{"accumulate", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, Payload: debounce.PayloadAccumulate, ItemField: "id"}, "", ""},
		{"dedup", debounce.Policy{Type: "t", Mode: debounce.ModeDedup}, "", ""},
		{"dedup until expiry", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 24 * time.Hour}, "", ""},
		{"throttle trailing last", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle, Window: 10 * s, Trailing: true, Payload: debounce.PayloadLast}, "", ""},
		{"throttle sub-second", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle, Window: 100 * time.Millisecond}, "", ""},

		{"bad type", debounce.Policy{Type: "send email", Mode: debounce.ModeDedup}, "type", `"send email" has ' '`},
		{"no mode", debounce.Policy{Type: "t"}, "mode", "missing; set dedup, throttle or debounce"},
		{"unknown mode", debounce.Policy{Type: "t", Mode: "delay"}, "mode", `"delay" is not a mode`},
		{"unknown payload", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, Payload: "all"}, "payload", `"all" is not a payload`},
		{"unknown fail", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Fail: "maybe"}, "fail", "use open or closed"},
		{"debounce without window", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce}, "window", "required"},
		{"debounce window under 1s", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 500 * time.Millisecond}, "window", "fire up to ~0.5s late"},
		{"extend without max wait", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, Extend: true}, "max_wait", "never run"},
		{"max wait under window", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 10 * s, Extend: true, MaxWait: 5 * s}, "max_wait", "shorter than the window"},
		{"ttl on debounce", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 30 * s, TTL: 10 * time.Minute}, "ttl", "no longer applies to debounce: a round lives until its job starts"},
		{"ttl on extend", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 30 * s, Extend: true, MaxWait: time.Minute, TTL: 45 * s}, "ttl", "remove ttl"},
		{"ttl on dedup until start", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, TTL: time.Hour}, "ttl", "with until: start the reservation lives until its job starts"},
		{"ttl on dedup until success", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Until: debounce.UntilSuccess, TTL: time.Hour}, "ttl", "until its job succeeds"},
		{"window over the limit", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 31 * 24 * time.Hour}, "window", "limit"},
		{"max wait without extend", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, MaxWait: time.Minute}, "max_wait", "only applies"},
		{"extend on dedup", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Extend: true}, "extend", "only applies to mode debounce"},
		{"dedup with window", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Window: s}, "window", "the dedup window is ttl"},
		{"dedup until expiry without ttl", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry}, "ttl", "required with until: expiry"},
		{"dedup with last", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Payload: debounce.PayloadLast}, "payload", "use mode debounce"},
		{"unknown until", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Until: "done"}, "until", `"done" is not a release point`},
		{"until on debounce", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, Until: debounce.UntilStart}, "until", "only applies to mode dedup"},
		{"throttle without window", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle}, "window", "required"},
		{"throttle with ttl", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle, Window: s, TTL: time.Hour}, "ttl", "remove ttl"},
		{"throttle trailing under 1s", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle, Window: 500 * time.Millisecond, Trailing: true}, "window", "trailing"},
		{"throttle last without trailing", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle, Window: s, Payload: debounce.PayloadLast}, "payload", "set trailing: true"},
		{"trailing on debounce", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, Trailing: true}, "trailing", "only applies to mode throttle"},
		{"max items without accumulate", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, MaxItems: 5}, "max_items", "only applies to payload accumulate"},
		{"item field without accumulate", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, ItemField: "id"}, "item_field", "only applies"},
		{"negative max items", debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: s, Payload: debounce.PayloadAccumulate, MaxItems: -1}, "max_items", "at least 1"},
		{"empty key field", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, KeyFields: []string{"a", ""}}, "key_fields", "entry 1 is empty"},
		{"repeated key field", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, KeyFields: []string{"a", "a"}}, "key_fields", "listed twice"},
		{"ttl over the limit", debounce.Policy{Type: "t", Mode: debounce.ModeDedup, Until: debounce.UntilExpiry, TTL: 365 * 24 * time.Hour}, "ttl", "limit"},
		{"negative window", debounce.Policy{Type: "t", Mode: debounce.ModeThrottle, Window: -s}, "ttl", "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Validate fills in the defaults itself: a policy as written
			// and the same with WithDefaults get the same answer.
			for _, p := range []debounce.Policy{tt.p, tt.p.WithDefaults()} {
				err := p.Validate()
				if tt.field == "" {
					if err != nil {
						t.Fatalf("valid policy refused: %v", err)
					}
					continue
				}
				var pe *debounce.PolicyError
				if !errors.As(err, &pe) || !errors.Is(err, debounce.ErrInvalidPolicy) {
					t.Fatalf("error %v, want a *PolicyError", err)
				}
				if pe.Field != tt.field || !strings.Contains(err.Error(), tt.msgHas) {
					t.Errorf("got %q (field %s), want field %s and %q", err, pe.Field, tt.field, tt.msgHas)
				}
			}
		})
	}
}

func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	p := debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: 30 * time.Second}.WithDefaults()
	if p.TTL != 0 || p.Payload != debounce.PayloadFirst || p.Fail != debounce.FailOpen {
		t.Errorf("debounce defaults: %+v", p)
	}
	p = debounce.Policy{Type: "t", Mode: debounce.ModeDedup}.WithDefaults()
	if p.Until != debounce.UntilStart || p.TTL != 0 {
		t.Errorf("dedup defaults: %+v", p)
	}
	p = debounce.Policy{Type: "t", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate}.WithDefaults()
	if p.MaxItems != debounce.DefaultMaxItems {
		t.Errorf("accumulate max items default %d", p.MaxItems)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	mr, rdb := miniClient(t)
	if _, err := debounce.New(debounce.Config{}); !errors.Is(err, debounce.ErrInvalidConfig) {
		t.Errorf("no Redis: %v", err)
	}
	// go-redis resends a command whose reply was lost three times by
	// default; a resent opening can reopen a round that already ran.
	resending := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true})
	defer resending.Close()
	if _, err := debounce.New(debounce.Config{Redis: resending}); !errors.Is(err, debounce.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxRetries: -1") {
		t.Errorf("a client that resends: %v, want it refused naming MaxRetries: -1", err)
	}
	if _, err := debounce.New(debounce.Config{Redis: resending, AllowResends: true}); err != nil {
		t.Errorf("a client that resends, allowed: %v", err)
	}
	if _, err := debounce.New(debounce.Config{Redis: rdb, MaxAge: -time.Second}); !errors.Is(err, debounce.ErrInvalidConfig) {
		t.Errorf("a negative MaxAge: %v", err)
	}
	if _, err := debounce.New(debounce.Config{Redis: rdb, Prefix: "a{b"}); err == nil || !strings.Contains(err.Error(), "must not contain") {
		t.Errorf("prefix with a brace: %v", err)
	}
	two := []debounce.Policy{{Type: "t", Mode: debounce.ModeDedup}, {Type: "t", Mode: debounce.ModeDedup}}
	if _, err := debounce.New(debounce.Config{Redis: rdb, Policies: two}); err == nil || !strings.Contains(err.Error(), "two policies") {
		t.Errorf("two policies for one type: %v", err)
	}
	// A schedule must fire before the stream drops it: the stream's MaxAge
	// (the Publisher's) must exceed every policy's longest delay.
	short := maxAgePublisher(2 * time.Minute)
	for _, p := range []debounce.Policy{
		{Type: "w", Mode: debounce.ModeDebounce, Window: 3 * time.Minute},
		{Type: "x", Mode: debounce.ModeDebounce, Window: time.Minute, Extend: true, MaxWait: 2 * time.Minute},
		{Type: "th", Mode: debounce.ModeThrottle, Window: 5 * time.Minute, Trailing: true},
	} {
		_, err := debounce.New(debounce.Config{Redis: rdb, Publisher: short, Policies: []debounce.Policy{p}})
		if !errors.Is(err, debounce.ErrInvalidPolicy) || !strings.Contains(err.Error(), "the stream keeps a message 2m0s") {
			t.Errorf("policy %s with a delay beyond the stream's MaxAge: %v", p.Type, err)
		}
	}
	ok := []debounce.Policy{{Type: "w", Mode: debounce.ModeDebounce, Window: 30 * time.Second}, {Type: "d", Mode: debounce.ModeDedup}}
	if _, err := debounce.New(debounce.Config{Redis: rdb, Publisher: short, Policies: ok}); err != nil {
		t.Errorf("delays within the stream's MaxAge: %v", err)
	}
	bad := []debounce.Policy{{Type: "t", Mode: debounce.ModeDebounce}}
	if _, err := debounce.New(debounce.Config{Redis: rdb, Policies: bad}); err == nil || err.Error() != "policy t: window: required: how long to wait for more events, e.g. window: 30s" {
		t.Errorf("bad policy: %v", err)
	}
}

// maxAgePublisher publishes nothing and says its stream keeps messages d.
type maxAgePublisher time.Duration

func (maxAgePublisher) Publish(context.Context, debounce.Job) error { return nil }
func (m maxAgePublisher) MaxAge() time.Duration                     { return time.Duration(m) }
