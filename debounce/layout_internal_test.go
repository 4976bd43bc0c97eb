package debounce

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// TestSeenEncoding: the 16-bit last-seen field is exact below 4 s, within
// 1/2048 of the offset above, monotonic (so the greatest encoding is the
// latest event's), and covers far more than the longest round.
func TestSeenEncoding(t *testing.T) {
	t.Parallel()
	for ms := int64(0); ms < 4096; ms++ {
		if got := decodeSeen(encodeSeen(ms)); got != ms {
			t.Fatalf("%d ms decodes to %d", ms, got)
		}
	}
	prev := uint64(0)
	check := func(ms int64) {
		v := encodeSeen(ms)
		if v > packMaxSeen {
			t.Fatalf("%d ms encodes to %d, over 16 bits", ms, v)
		}
		if v < prev {
			t.Fatalf("not monotonic at %d ms: %d after %d", ms, v, prev)
		}
		prev = v
		got := decodeSeen(v)
		if got > ms || ms-got > ms/2048 {
			t.Fatalf("%d ms decodes to %d (error %d, more than 1/2048)", ms, got, ms-got)
		}
	}
	for ms := int64(0); ms < 10_000_000; ms += 1 + ms/997 {
		check(ms)
	}
	for range 100_000 {
		ms := rand.Int64N(int64(MaxTTL.Milliseconds()))
		if got := decodeSeen(encodeSeen(ms)); got > ms || ms-got > ms/2048 {
			t.Fatalf("%d ms decodes to %d", ms, got)
		}
	}
	if encodeSeen(-5) != 0 {
		t.Error("a negative offset must encode as 0")
	}
	if v := encodeSeen(1 << 62); v != packMaxSeen {
		t.Errorf("a huge offset encodes to %d, want saturation at %d", v, packMaxSeen)
	}
	if d := decodeSeen(packMaxSeen); d < 100*365*24*3600*1000 {
		t.Errorf("the largest seen is %d ms, less than a century", d)
	}
}

// TestTokenText: a token is written as 16 hex digits, zero-padded (what
// round identities, job message ids and the API carry), read back by
// ParseToken; the zero token is the empty string.
func TestTokenText(t *testing.T) {
	t.Parallel()
	want := map[Token]string{
		0: "", 1: "0000000000000001", 0xf: "000000000000000f", 0x00689d4aae71e0a6: "00689d4aae71e0a6",
		0x8000000000000000: "8000000000000000", 0xffffffffffffffff: "ffffffffffffffff",
	}
	for i := range 1000 {
		v := Token(rand.Uint64() >> (i % 64))
		want[v] = fmt.Sprintf("%016x", uint64(v))
		if v == 0 {
			want[v] = ""
		}
	}
	for tok, text := range want {
		if got := tok.String(); got != text {
			t.Fatalf("Token(%#x).String() = %q, want %q", uint64(tok), got, text)
		}
		if back, err := ParseToken(text); err != nil || back != tok {
			t.Fatalf("ParseToken(%q) = %#x, %v, want %#x", text, uint64(back), err, uint64(tok))
		}
	}
}

// TestIdentitySizeBounds: identitySize is a true bound of what
// appendIdentity writes, so a held opening's identity is written into its
// one allocation, not grown (and copied) on the way: the longest type, the
// longest times, token, lease and TTL, a trace context.
func TestIdentitySizeBounds(t *testing.T) {
	t.Parallel()
	for _, job := range []Job{
		{Type: "t", Args: json.RawMessage(`{}`), Mode: ModeDebounce, Payload: PayloadFirst},
		{
			Type: strings.Repeat("T", fingerprint.MaxTypeLen), Args: json.RawMessage(`{"tenant_id":"tenant-1"}`),
			Mode: ModeDebounce, Payload: PayloadAccumulate, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			Token: Token(math.MaxUint64), TTL: 1<<63 - 1, Lease: 1<<63 - 1,
			OpenedAt: time.UnixMilli(-1 << 62), DueAt: time.UnixMilli(-1 << 62),
		},
	} {
		size := identitySize(job)
		b := appendIdentity(make([]byte, 0, size), job)
		if len(b) > size || cap(b) != size {
			t.Errorf("identity of %d bytes (capacity %d) for a bound of %d: %s", len(b), cap(b), size, b)
		}
	}
}
