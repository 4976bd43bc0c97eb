package publisher_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
	"github.com/nats-io/nats.go"
)

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	full := testJob(t, "recompute_financials", time.Now().Add(time.Minute))
	tests := []struct {
		name   string
		mutate func(*debounce.Job)
	}{
		{"scheduled", func(*debounce.Job) {}},
		{"immediate", func(j *debounce.Job) { j.DueAt = time.Time{} }},
		{"bypassed", func(j *debounce.Job) { j.Token = 0 }},
		{"no args", func(j *debounce.Job) { j.Args = nil }},
		{"no mode payload trace", func(j *debounce.Job) { j.Mode, j.Payload, j.TraceParent = "", "", "" }},
		{"zero times", func(j *debounce.Job) { j.OpenedAt, j.DueAt, j.TTL = time.Time{}, time.Time{}, 0 }},
		{"before 1970", func(j *debounce.Job) { j.OpenedAt = time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC) }},
		{"later version", func(j *debounce.Job) { j.Version = 41 }},
		{"max token", func(j *debounce.Job) { j.Token = ^debounce.Token(0) }},
		{"dotted type", func(j *debounce.Job) { j.Type = "billing.tenant:recompute-v2" }},
		{"accumulate", func(j *debounce.Job) {
			j.Mode, j.Payload, j.Args = debounce.ModeDebounce, debounce.PayloadAccumulate, json.RawMessage(`[1,2,3]`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := full
			tt.mutate(&job)
			h := publisher.EncodeHeaders(job)
			got, err := publisher.DecodeJob(h, job.Args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, job) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, job)
			}
		})
	}
}

// TestHeaderContract pins the header names and value forms: other languages
// and the worker read them.
func TestHeaderContract(t *testing.T) {
	t.Parallel()
	job := testJob(t, "recompute", time.UnixMilli(1_800_000_000_123))
	job.Token = 0x00ab00cd00ef0012
	job.OpenedAt = time.UnixMilli(1_799_999_990_000)
	job.TTL = 5*time.Minute + 1500*time.Millisecond
	job.Version = 3
	h := publisher.EncodeHeaders(job)
	want := map[string]string{
		"Coalesce-Type":        "recompute",
		"Coalesce-Key":         job.Key.String(),
		"Coalesce-Fingerprint": job.Fingerprint.String(),
		"Coalesce-Round":       "00ab00cd00ef0012",
		"Coalesce-Mode":        "debounce",
		"Coalesce-Payload":     "first",
		"Coalesce-Opened-At":   "1799999990000",
		"Coalesce-Due-At":      "1800000000123",
		"Coalesce-TTL":         "301500",
		"Coalesce-Version":     "3",
		"traceparent":          job.TraceParent,
	}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %d of them", h, len(want))
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Fatalf("%s = %q, want %q", k, got, v)
		}
	}
	if len(h.Get("Coalesce-Key")) != 64 || len(h.Get("Coalesce-Fingerprint")) != 64 {
		t.Fatal("key and fingerprint must be 64 hex digits")
	}
	job.Token, job.DueAt = 0, time.Time{}
	h = publisher.EncodeHeaders(job)
	for _, absent := range []string{"Coalesce-Round", "Coalesce-Due-At"} {
		if _, ok := h[absent]; ok {
			t.Fatalf("%s set on a bypassed immediate job", absent)
		}
	}
}

func TestDecodeJobErrors(t *testing.T) {
	t.Parallel()
	good := publisher.EncodeHeaders(testJob(t, "decode", time.Now().Add(time.Minute)))
	tests := []struct {
		name   string
		header string
		value  string // "" deletes the header
		want   string
	}{
		{"no type", publisher.HeaderType, "", "header Coalesce-Type is missing"},
		{"bad type", publisher.HeaderType, "-x", "header Coalesce-Type"},
		{"no key", publisher.HeaderKey, "", "header Coalesce-Key is missing"},
		{"short key", publisher.HeaderKey, "abcd", "header Coalesce-Key \"abcd\" is malformed"},
		{"no fingerprint", publisher.HeaderFingerprint, "", "header Coalesce-Fingerprint is missing"},
		{"bad fingerprint", publisher.HeaderFingerprint, strings.Repeat("g", 64), "header Coalesce-Fingerprint"},
		{"short round", publisher.HeaderRound, "abc", "header Coalesce-Round \"abc\" is malformed"},
		{"zero round", publisher.HeaderRound, "0000000000000000", "header Coalesce-Round"},
		{"non-hex round", publisher.HeaderRound, "zzzzzzzzzzzzzzzz", "header Coalesce-Round"},
		{"no opened-at", publisher.HeaderOpenedAt, "", "header Coalesce-Opened-At is missing"},
		{"bad opened-at", publisher.HeaderOpenedAt, "yesterday", "header Coalesce-Opened-At \"yesterday\""},
		{"bad due-at", publisher.HeaderDueAt, "1.5", "header Coalesce-Due-At"},
		{"no ttl", publisher.HeaderTTL, "", "header Coalesce-TTL is missing"},
		{"negative ttl", publisher.HeaderTTL, "-1", "header Coalesce-TTL"},
		{"no version", publisher.HeaderVersion, "", "header Coalesce-Version is missing"},
		{"bad version", publisher.HeaderVersion, "v2", "header Coalesce-Version \"v2\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := nats.Header{}
			for k, v := range good {
				h[k] = v
			}
			if tt.value == "" {
				h.Del(tt.header)
			} else {
				h.Set(tt.header, tt.value)
			}
			_, err := publisher.DecodeJob(h, nil)
			if !errors.Is(err, publisher.ErrDecode) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeJob: %v, want ErrDecode containing %q", err, tt.want)
			}
		})
	}
}

// FuzzDecodeJob: whatever DecodeJob accepts, EncodeHeaders writes back to
// headers that decode to the same job.
func FuzzDecodeJob(f *testing.F) {
	j := testJob(f, "fuzz", time.UnixMilli(1_800_000_000_000))
	h := publisher.EncodeHeaders(j)
	f.Add(h.Get(publisher.HeaderType), h.Get(publisher.HeaderKey), h.Get(publisher.HeaderRound), h.Get(publisher.HeaderOpenedAt),
		h.Get(publisher.HeaderDueAt), h.Get(publisher.HeaderTTL), h.Get(publisher.HeaderVersion), []byte(j.Args))
	f.Add("a.b", strings.Repeat("0", 64), "", "-62135596800000", "", "0", "0", []byte(nil))
	f.Fuzz(func(t *testing.T, typ, key, round, opened, due, ttl, version string, data []byte) {
		in := nats.Header{}
		for k, v := range map[string]string{
			publisher.HeaderType: typ, publisher.HeaderKey: key, publisher.HeaderFingerprint: key,
			publisher.HeaderRound: round, publisher.HeaderOpenedAt: opened, publisher.HeaderDueAt: due,
			publisher.HeaderTTL: ttl, publisher.HeaderVersion: version,
		} {
			if v != "" {
				in.Set(k, v)
			}
		}
		job, err := publisher.DecodeJob(in, data)
		if err != nil {
			if !errors.Is(err, publisher.ErrDecode) {
				t.Fatalf("error without ErrDecode: %v", err)
			}
			return
		}
		again, err := publisher.DecodeJob(publisher.EncodeHeaders(job), data)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(again, job) {
			t.Fatalf("not a fixed point:\n%+v\n%+v", job, again)
		}
	})
}
