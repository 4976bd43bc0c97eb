package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/coalesce-io/coalesce/fingerprint"
)

var fuzzSeeds = []string{
	`{"b":1,"a":2.0}`,
	`{"tenant_id":42,"user":{"id":7,"name":"Ana"},"tags":["x","y"]}`,
	`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
	`{"\ue000":1,"\ud83d\ude00":2,"\u0080":[{"b":{},"a":[]}]}`,
	`[9007199254740992,-0,1e21,1e-7,5e-324]`,
	`"\ud83d\ude00"`,
	`{"a":1,"a":2}`,
	`[9007199254740993]`,
	`[9007199254740993.0,9.007199254740993e15,9007199254740992.0,1000000000000000000000,1.5e300,9007199254740993.5]`,
	"[\"\ufffe\",\"\ufdd0\",\"\U0010ffff\",\"\ufdcf\ufdf0\ufffd\"]",
	`{"\uffff":1,"\ud83f\udffe":["\uFDEF"]}`,
	"\ufeff{}",
	`[1e400]`,
	"[\"\xff\"]",
	`["\ud800"]`,
	`{"a":[1,2`,
	` null `,
}

// oracleTolerates are the error codes for input jsontext accepts: rules fp1
// adds to RFC 8785 that the oracle does not enforce.
var oracleTolerates = map[string]bool{"unsafe_integer": true, "non_finite": true, "too_deep": true, "noncharacter": true}

// FuzzCanonicalFixedPoint: the canonical form canonicalizes to itself, has the
// same fingerprint as the input, and matches jsontext (an independent RFC 8785
// implementation) whenever both accept the input.
func FuzzCanonicalFixedPoint(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		canon, err := fingerprint.Canonicalize(in)
		oracle := jsontext.Value(bytes.Clone(in))
		oracleErr := oracle.Canonicalize()
		if err != nil {
			code := fingerprint.Code(err)
			if code == "" {
				t.Fatalf("error without a kind: %v", err)
			}
			// Only our extra checks may refuse what jsontext accepts: numbers
			// beyond 2^53 that would collide, overflow, nesting depth and the
			// I-JSON noncharacters, none of which jsontext enforces.
			if oracleErr == nil && !oracleTolerates[code] {
				t.Fatalf("we refuse %q (%v) but jsontext accepts it as %s", in, err, oracle)
			}
			if oracleErr == nil && code == "noncharacter" && !hasNoncharacter(oracle) {
				t.Fatalf("we refuse %q (%v) but jsontext's %s has no noncharacter", in, err, oracle)
			}
			return
		}
		if hasNoncharacter(canon) {
			t.Fatalf("we accept %q with a noncharacter: %s", in, canon)
		}
		if oracleErr != nil {
			t.Fatalf("we accept %q as %s but jsontext refuses it: %v", in, canon, oracleErr)
		}
		if !bytes.Equal(canon, oracle) {
			t.Fatalf("canonical form of %q\n ours %s\n jsontext %s", in, canon, oracle)
		}
		again, err := fingerprint.Canonicalize(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("canonical form is not a fixed point: %s -> %s (%v)", canon, again, err)
		}
		a, err1 := fingerprint.FromJSON("t", in)
		b, err2 := fingerprint.FromJSON("t", canon)
		if err1 != nil || err2 != nil || a != b {
			t.Fatalf("fingerprint of input %s (%v) != of canonical %s (%v)", a, err1, b, err2)
		}
	})
}

// hasNoncharacter reports whether canonical JSON (all strings raw UTF-8) holds
// a noncharacter: U+FDD0-U+FDEF, U+xFFFE, U+xFFFF.
func hasNoncharacter(b []byte) bool {
	for _, r := range string(b) {
		if r >= 0xFDD0 && r <= 0xFDEF || r&0xFFFE == 0xFFFE {
			return true
		}
	}
	return false
}

// FuzzNumberRule checks the rule for numbers beyond 2^53 against math/big: a
// literal whose exact value is an integer above 2^53 in magnitude passes only
// when its significant digits are the shortest round-trip digits of its
// double; every other finite number passes.
func FuzzNumberRule(f *testing.F) {
	for _, s := range []string{"9007199254740993", "9007199254740993.0", "9.007199254740993e15", "9007199254740992.0",
		"1e20", "1.5e300", "1152921504606847000", "1000000000000000000000", "123000000000000000000000",
		"9007199254740993.5", "0.0009007199254740993e19", "90071992547409930e-1", "-1.7976931348623158e308", "1e23", "0.1"} {
		f.Add(s)
	}
	twoTo53 := new(big.Int).Lsh(big.NewInt(1), 53)
	f.Fuzz(func(t *testing.T, lit string) {
		m := jsonNumber.FindStringSubmatch(lit)
		if m == nil || len(lit) > 400 {
			return
		}
		if e, _ := strconv.Atoi(m[3]); len(m[3]) > 4 || e > 400 || e < -400 {
			return // keep big.Rat small
		}
		canon, err := fingerprint.Canonicalize([]byte(lit))
		fl, perr := strconv.ParseFloat(lit, 64)
		if perr != nil {
			if code := fingerprint.Code(err); code != "non_finite" && code != "unsafe_integer" {
				t.Fatalf("%s overflows, got %q (%v)", lit, canon, err)
			}
			return
		}
		r, ok := new(big.Rat).SetString(lit)
		if !ok {
			t.Fatalf("big.Rat refuses %s", lit)
		}
		subject := r.IsInt() && new(big.Int).Abs(r.Num()).Cmp(twoTo53) > 0
		digits := strings.Trim(strings.ReplaceAll(strings.TrimPrefix(m[1], "-"), ".", ""), "0")
		short := strconv.FormatFloat(math.Abs(fl), 'e', -1, 64)
		short = strings.ReplaceAll(short[:strings.IndexByte(short, 'e')], ".", "")
		if subject && digits != short {
			if !errors.Is(err, fingerprint.ErrUnsafeInteger) {
				t.Fatalf("%s is an integer beyond 2^53 without its shortest digits %s; got %s (%v)", lit, short, canon, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s refused: %v", lit, err)
		}
		if want, _ := json.Marshal(fl); fl != 0 && math.Abs(fl) < 1e21 && string(canon) != string(want) {
			t.Fatalf("%s canonical %s, want %s", lit, canon, want)
		}
	})
}

// jsonNumber matches a JSON number: mantissa, fraction, exponent digits.
var jsonNumber = regexp.MustCompile(`^(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?)(?:[eE]([+-]?)([0-9]+))?$`)

// FuzzPermutedMembers: reordering members, re-escaping strings and adding
// whitespace never changes the fingerprint.
func FuzzPermutedMembers(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint64(i))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		want, err := fingerprint.FromJSON("t", in)
		if err != nil {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("encoding/json refuses %q that fingerprint accepted: %v", in, err)
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		shuffled := writeShuffled(nil, v, rng)
		got, err := fingerprint.FromJSON("t", shuffled)
		if err != nil {
			t.Fatalf("shuffled %s of %q refused: %v", shuffled, in, err)
		}
		if got != want {
			t.Fatalf("shuffling %q into %s changed the fingerprint", in, shuffled)
		}
	})
}

// writeShuffled writes v as JSON with object members in random order, random
// whitespace and strings escaped at random.
func writeShuffled(b []byte, v any, rng *rand.Rand) []byte {
	ws := func() {
		for range rng.IntN(3) {
			b = append(b, " \t\n\r"[rng.IntN(4)])
		}
	}
	ws()
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = writeString(b, k, rng)
			ws()
			b = append(b, ':')
			b = writeShuffled(b, v[k], rng)
		}
		b = append(b, '}')
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = writeShuffled(b, e, rng)
		}
		b = append(b, ']')
	case string:
		b = writeString(b, v, rng)
	case json.Number:
		b = append(b, v...)
	case bool:
		b = strconv.AppendBool(b, v)
	case nil:
		b = append(b, "null"...)
	}
	ws()
	return b
}

func writeString(b []byte, s string, rng *rand.Rand) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r < 0x20 || rng.IntN(4) == 0:
			if r > 0xFFFF {
				r1, r2 := utf16Pair(r)
				b = appendU(b, r1)
				b = appendU(b, r2)
			} else {
				b = appendU(b, r)
			}
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}

func appendU(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}

// FuzzArbitraryBytes: any input either fingerprints or returns a classified
// error; nothing panics, with or without key fields.
func FuzzArbitraryBytes(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), "tenant_id")
	}
	f.Fuzz(func(t *testing.T, in []byte, field string) {
		for _, fields := range [][]string{nil, {field}, {field, "a"}} {
			fp, err := fingerprint.FromJSON("t", in, fields...)
			if err != nil {
				var fe *fingerprint.Error
				if !errors.As(err, &fe) || fe.Code() == "" {
					t.Fatalf("unclassified error %v", err)
				}
				continue
			}
			if fp.IsZero() {
				t.Fatal("zero fingerprint without error")
			}
		}
	})
}

// FuzzEncodingJSONRoundTrip: args decoded with encoding/json and encoded again
// (through Of, or json.Marshal and FromJSON) keep their fingerprint.
func FuzzEncodingJSONRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, err := fingerprint.FromJSON("t", in)
		if err != nil {
			return
		}
		var v any
		if err := json.Unmarshal(in, &v); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", in, err)
		}
		got, err := fingerprint.Of("t", v)
		if err != nil || got != want {
			t.Fatalf("Of(decoded %q) = %s, %v; want %s", in, got, err, want)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := fingerprint.FromJSON("t", raw); err != nil || got != want {
			t.Fatalf("FromJSON(json.Marshal(decoded %q)) = %s, %v; want %s", in, got, err, want)
		}
	})
}
