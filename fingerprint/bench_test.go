package fingerprint_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// typicalArgs is a ~200-byte args object as producers send it.
var typicalArgs = []byte(`{"tenant_id":"tenant-12345","user":{"id":123456,"name":"Ana Souza","roles":["admin","billing"]},"period":"2026-08","amount":1234.5,"flags":{"dry_run":false,"force":true},"source":"orders.updated"}`)

// largeArgs is a ~4 KiB args object: a list of changed records.
var largeArgs = func() []byte {
	var b strings.Builder
	b.WriteString(`{"tenant_id":"tenant-12345","changed":[`)
	for i := 0; b.Len() < 4000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%05d","qty":%d,"price":%d.%02d,"tags":["a","b"]}`, i, i%7, i*13%1000, i%100)
	}
	b.WriteString(`],"source":"inventory.changed"}`)
	return []byte(b.String())
}()

func BenchmarkFromJSON(b *testing.B) {
	for _, tc := range []struct {
		name string
		args []byte
	}{{"200B", typicalArgs}, {"4KiB", largeArgs}} {
		s, err := fingerprint.NewScheme("recompute_financials")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.args)))
			for b.Loop() {
				if _, err := s.FromJSON(tc.args); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/key_fields", func(b *testing.B) {
			k, _ := fingerprint.NewScheme("recompute_financials", "tenant_id")
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.args)))
			for b.Loop() {
				if _, err := k.FromJSON(tc.args); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The floor: hashing the same bytes with no canonicalization at all.
		b.Run(tc.name+"/sha256_floor", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.args)))
			for b.Loop() {
				_ = sha256.Sum256(tc.args)
			}
		})
		// For comparison: jsontext's RFC 8785 canonicalization plus the hash,
		// without the I-JSON checks fp1 adds.
		b.Run(tc.name+"/jsontext_canonicalize", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.args)))
			buf := make([]byte, 0, 2*len(tc.args))
			for b.Loop() {
				v := jsontext.Value(append(buf[:0], tc.args...))
				if err := v.Canonicalize(); err != nil {
					b.Fatal(err)
				}
				_ = sha256.Sum256(v)
			}
		})
	}
}

func BenchmarkOf(b *testing.B) {
	type args struct {
		TenantID string `json:"tenant_id"`
		Period   string `json:"period"`
		Amount   float64
	}
	s, _ := fingerprint.NewScheme("recompute_financials")
	v := args{"tenant-12345", "2026-08", 1234.5}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Of(v); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBenchmarkInputsAreValid(t *testing.T) {
	t.Parallel()
	for _, in := range [][]byte{typicalArgs, largeArgs} {
		canon, err := fingerprint.Canonicalize(in)
		if err != nil {
			t.Fatal(err)
		}
		v := jsontext.Value(bytes.Clone(in))
		if err := v.Canonicalize(); err != nil || !bytes.Equal(v, canon) {
			t.Fatalf("benchmark input canonical form disagrees with jsontext: %v", err)
		}
	}
	if len(typicalArgs) < 180 || len(typicalArgs) > 220 || len(largeArgs) < 4000 || len(largeArgs) > 4200 {
		t.Fatalf("benchmark inputs are %d and %d bytes, want ~200 and ~4096", len(typicalArgs), len(largeArgs))
	}
}

// TestFromJSONDoesNotAllocate guards the hot path, including the checks for
// numbers beyond 2^53 and for noncharacters on the inputs that pass them.
func TestFromJSONDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	s, err := fingerprint.NewScheme("recompute_financials")
	if err != nil {
		t.Fatal(err)
	}
	edge := []byte(`{"big":[9007199254740994,1000000000000000000000,9.007199254740992e15,1.5e300,9007199254740993.5],` +
		`"s":"\ufdcf\ufdf0\ufffd\ud83f\udffd` + "\ufdcf\ufffd\U0010fffd" + `"}`)
	for _, in := range [][]byte{typicalArgs, largeArgs, edge} {
		if _, err := s.FromJSON(in); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(200, func() { _, _ = s.FromJSON(in) }); n != 0 {
			t.Errorf("FromJSON(%.40s…) allocates %v times per call", in, n)
		}
	}
}
