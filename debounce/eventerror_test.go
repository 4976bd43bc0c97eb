package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
)

// TestEventErrorNamesFieldAndCode: every refusal of an event is an
// *EventError that matches ErrInvalidEvent and names the field and code
// the daemon answers with, so no caller reads the message to tell them.
func TestEventErrorNamesFieldAndCode(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b,
			debounce.Policy{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Second, KeyFields: []string{"tenant_id"}},
			debounce.Policy{Type: "reindex", Mode: debounce.ModeDebounce, Window: time.Second, Payload: debounce.PayloadAccumulate, ItemField: "id", KeyFields: []string{"tenant"}},
			debounce.Policy{Type: "notify", Mode: debounce.ModeDedup})
		cases := []struct {
			name             string
			ev               debounce.Event
			field, code, msg string
		}{
			{"no args", debounce.Event{Type: "notify"}, "args", "invalid_event", "args: required"},
			{"bad traceparent", debounce.Event{Type: "notify", Args: json.RawMessage(`{}`), TraceParent: "00-x"}, "traceparent", "invalid_traceparent", "not a W3C traceparent"},
			{"key too long", debounce.Event{Type: "notify", Args: json.RawMessage(`{}`), Key: strings.Repeat("k", debounce.MaxExplicitKeyLen+1)}, "key", "invalid_event", "key: must be"},
			{"missing key field", debounce.Event{Type: "recompute", Args: json.RawMessage(`{"x":1}`)}, "", "missing_key_field", "tenant_id"},
			{"integer beyond 2^53", debounce.Event{Type: "recompute", Args: json.RawMessage(`{"tenant_id":9007199254740993}`)}, "args.tenant_id", "unsafe_integer", "send it as a string"},
			{"item field missing", debounce.Event{Type: "reindex", Args: json.RawMessage(`{"tenant":1}`)}, "", "missing_key_field", "item_field: "},
			{"invalid type", debounce.Event{Type: "a b", Args: json.RawMessage(`{}`)}, "type", "invalid_type", ""},
		}
		for _, c := range cases {
			_, err := f.c.Submit(context.Background(), c.ev)
			var ee *debounce.EventError
			if !errors.As(err, &ee) || !errors.Is(err, debounce.ErrInvalidEvent) {
				t.Errorf("%s: %v, want an *EventError matching ErrInvalidEvent", c.name, err)
				continue
			}
			if (c.field != "" && ee.Field != c.field) || ee.Code != c.code || !strings.Contains(ee.Msg, c.msg) {
				t.Errorf("%s: field %q code %q msg %q; want field %q code %q with %q", c.name, ee.Field, ee.Code, ee.Msg, c.field, c.code, c.msg)
			}
			if err.Error() != debounce.ErrInvalidEvent.Error()+": "+ee.Msg {
				t.Errorf("%s: Error() %q", c.name, err)
			}
		}
		// RoundKeyOf (the batch groups lines by it) and Explain tell an
		// invalid type from a missing policy as Submit does.
		bad := debounce.Event{Type: "a b", Args: json.RawMessage(`{}`)}
		_, errKey := f.c.RoundKeyOf(bad)
		_, errExplain := f.c.Explain(context.Background(), bad)
		for what, err := range map[string]error{"RoundKeyOf": errKey, "Explain": errExplain} {
			var ee *debounce.EventError
			if !errors.As(err, &ee) || ee.Code != "invalid_type" {
				t.Errorf("%s of an invalid type: %v, want invalid_type", what, err)
			}
		}
	})
}
