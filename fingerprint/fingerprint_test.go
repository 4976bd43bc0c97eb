package fingerprint_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"

	"github.com/coalesce-io/coalesce/fingerprint"
)

func TestCanonicalizeRFC8785Examples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{
			name: "RFC 8785 section 3.2.2 sample",
			in:   `{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "RFC 8785 section 3.2.3 sorting by UTF-16 code units",
			in:   `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "non-BMP sorts before private use", in: `{"\ue000":1,"\ud83d\ude00":2}`, want: "{\"😀\":2,\"\ue000\":1}"},
		{name: "nested objects sorted", in: `{"b":{"d":1,"c":[{"z":0,"y":1}]},"a":null}`, want: `{"a":null,"b":{"c":[{"y":1,"z":0}],"d":1}}`},
		{name: "whitespace removed", in: " {\n\t\"a\" : [ 1 , 2 ] \r\n} ", want: `{"a":[1,2]}`},
		{name: "-0 is 0", in: `[-0,-0.0,0e5]`, want: `[0,0,0]`},
		{name: "ES6 number forms", in: `[1.0,1e21,1e20,1e-7,0.000001,1E2,4.50,-1.5e-10,2.5e+25]`, want: `[1,1e+21,100000000000000000000,1e-7,0.000001,100,4.5,-1.5e-10,2.5e+25]`},
		{name: "2^53 is accepted", in: `[9007199254740992,-9007199254740992]`, want: `[9007199254740992,-9007199254740992]`},
		{name: "integers beyond 2^53 in canonical form are accepted", in: `[100000000000000000000,9007199254740994]`, want: `[100000000000000000000,9007199254740994]`},
		// Beyond 2^53 an integer is accepted in any form whose significant
		// digits are the shortest round-trip digits of its double.
		{name: "2^53 with a fraction or exponent", in: `[9007199254740992.0,9.007199254740992e15,-9007199254740992e0]`, want: `[9007199254740992,9007199254740992,-9007199254740992]`},
		{name: "shortest digits in other forms", in: `[1e20,1.5e300,9007199254740994.000,9007199254740994000e-3,0.9007199254740994e16]`, want: `[100000000000000000000,1.5e+300,9007199254740994,9007199254740994,9007199254740994]`},
		{name: "2^60 with its shortest digits", in: `[1152921504606847000,1.152921504606847e18]`, want: `[1152921504606847000,1152921504606847000]`},
		{name: "1e21 written out is exact", in: `[1000000000000000000000,-1000000000000000000000]`, want: `[1e+21,-1e+21]`},
		{name: "integer literals beyond 1e21 with shortest digits", in: `[123000000000000000000000,100000000000000000000000]`, want: `[1.23e+23,1e+23]`},
		{name: "non-integers beyond 2^53 round as usual", in: `[9007199254740993.5,12345678901234567.89,0.1,1.25e-3]`, want: `[9007199254740994,12345678901234568,0.1,0.00125]`},
		{name: "noncharacter neighbours raw", in: "[\"\ufdcf\ufdf0\ufffd\ufeff\U0001fffd\U0010fffd\"]", want: "[\"\ufdcf\ufdf0\ufffd\ufeff\U0001fffd\U0010fffd\"]"},
		{name: "noncharacter neighbours escaped", in: `{"\ufdcf":"\uFDF0\ufffd\ufeff\ud83f\udffd\udbff\udffd"}`, want: "{\"\ufdcf\":\"\ufdf0\ufffd\ufeff\U0001fffd\U0010fffd\"}"},
		{name: "nesting at MaxDepth", in: strings.Repeat("[", fingerprint.MaxDepth) + "1" + strings.Repeat("]", fingerprint.MaxDepth), want: strings.Repeat("[", fingerprint.MaxDepth) + "1" + strings.Repeat("]", fingerprint.MaxDepth)},
		{name: "objects nested at MaxDepth", in: strings.Repeat(`{"a":`, fingerprint.MaxDepth-1) + "{}" + strings.Repeat("}", fingerprint.MaxDepth-1), want: strings.Repeat(`{"a":`, fingerprint.MaxDepth-1) + "{}" + strings.Repeat("}", fingerprint.MaxDepth-1)},
		{name: "underflow to zero", in: `[1e-400]`, want: `[0]`},
		{name: "minimal escapes", in: `"\u0041\/\u2028\u007f\ud83d\ude00\t\u001f"`, want: "\"A/\u2028\u007f😀\\t\\u001f\""},
		{name: "top-level scalar", in: ` true `, want: `true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := fingerprint.Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonicalize(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestFromJSONRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		jobType   string
		args      string
		keyFields []string
		kind      error
		msg       string // the whole Error() text
	}{
		{"unsafe integer names its path", "t", `{"user":{"id":9007199254740993}}`, nil, fingerprint.ErrUnsafeInteger,
			"args.user.id: integer 9007199254740993 exceeds 2^53 and would lose precision (it reads as 9007199254740992); send it as a string, or as 9007199254740992 if that value is meant"},
		{"negative unsafe integer in array", "t", `{"ids":[1,-9007199254740993]}`, nil, fingerprint.ErrUnsafeInteger,
			"args.ids[1]: integer -9007199254740993 exceeds 2^53 and would lose precision (it reads as -9007199254740992); send it as a string, or as -9007199254740992 if that value is meant"},
		{"twenty digits", "t", `12345678901234567890`, nil, fingerprint.ErrUnsafeInteger,
			"args: integer 12345678901234567890 exceeds 2^53 and would lose precision (it reads as 12345678901234567000); send it as a string, or as 12345678901234567000 if that value is meant"},
		{"2^60 written exactly", "t", `[1152921504606846976]`, nil, fingerprint.ErrUnsafeInteger,
			"args[0]: integer 1152921504606846976 exceeds 2^53 and would lose precision (it reads as 1152921504606847000); send it as a string, or as 1152921504606847000 if that value is meant"},
		{"integer overflowing a double", "t", "1" + strings.Repeat("0", 400), nil, fingerprint.ErrUnsafeInteger,
			"args: integer 1000000000000000000000000000000000000000… exceeds 2^53 and would lose precision; send it as a string"},
		{"2^53+1 with a fraction", "t", `{"id":9007199254740993.0}`, nil, fingerprint.ErrUnsafeInteger,
			"args.id: number 9007199254740993.0 denotes an integer beyond 2^53 and would lose precision (it reads as 9007199254740992); send it as a string, or as 9007199254740992 if that value is meant"},
		{"2^53+1 in exponent form", "t", `[9.007199254740993e15]`, nil, fingerprint.ErrUnsafeInteger,
			"args[0]: number 9.007199254740993e15 denotes an integer beyond 2^53 and would lose precision (it reads as 9007199254740992); send it as a string, or as 9007199254740992 if that value is meant"},
		{"-(2^53+1) with leading zeros and exponent", "t", `[-0.0009007199254740993E+19]`, nil, fingerprint.ErrUnsafeInteger,
			"args[0]: number -0.0009007199254740993E+19 denotes an integer beyond 2^53 and would lose precision (it reads as -9007199254740992); send it as a string, or as -9007199254740992 if that value is meant"},
		{"2^53+1 with a negative exponent", "t", `[90071992547409930e-1]`, nil, fingerprint.ErrUnsafeInteger,
			"args[0]: number 90071992547409930e-1 denotes an integer beyond 2^53 and would lose precision (it reads as 9007199254740992); send it as a string, or as 9007199254740992 if that value is meant"},
		{"17 digits where 16 are shortest", "t", `9.9999999999999992e22`, nil, fingerprint.ErrUnsafeInteger,
			"args: number 9.9999999999999992e22 denotes an integer beyond 2^53 and would lose precision (it reads as 1e+23); send it as a string, or as 1e+23 if that value is meant"},
		{"rounds to the largest double", "t", `1.7976931348623158e308`, nil, fingerprint.ErrUnsafeInteger,
			"args: number 1.7976931348623158e308 denotes an integer beyond 2^53 and would lose precision (it reads as 1.7976931348623157e+308); send it as a string, or as 1.7976931348623157e+308 if that value is meant"},
		{"noncharacter raw in a value", "t", "{\"s\":\"a\ufffeb\"}", nil, fingerprint.ErrNoncharacter,
			"args.s: noncharacter U+FFFE at byte 7 in a string; I-JSON (RFC 7493) forbids noncharacters: remove it, or send binary data as base64"},
		{"noncharacter escaped in a value", "t", `{"s":["\uFDD0"]}`, nil, fingerprint.ErrNoncharacter,
			`args.s[0]: noncharacter U+FDD0 (\uFDD0) at byte 7 in a string; I-JSON (RFC 7493) forbids noncharacters: remove it, or send binary data as base64`},
		{"noncharacter escaped as a surrogate pair", "t", `["\ud83f\udfff"]`, nil, fingerprint.ErrNoncharacter,
			`args[0]: noncharacter U+1FFFF (\ud83f\udfff) at byte 2 in a string; I-JSON (RFC 7493) forbids noncharacters: remove it, or send binary data as base64`},
		{"noncharacter raw in a name", "t", "{\"a\":{\"\U0010ffff\":1}}", nil, fingerprint.ErrNoncharacter,
			"args.a: noncharacter U+10FFFF at byte 7 in a string; I-JSON (RFC 7493) forbids noncharacters: remove it, or send binary data as base64"},
		{"noncharacter escaped in a name", "t", `{"x\ufdef":1}`, nil, fingerprint.ErrNoncharacter,
			`args: noncharacter U+FDEF (\ufdef) at byte 3 in a string; I-JSON (RFC 7493) forbids noncharacters: remove it, or send binary data as base64`},
		{"noncharacter U+FFFF raw", "t", "\"\uffff\"", nil, fingerprint.ErrNoncharacter, ""},
		{"noncharacter U+2FFFE raw", "t", "\"\U0002fffe\"", nil, fingerprint.ErrNoncharacter, ""},
		{"noncharacter U+10FFFE escaped", "t", `"\uDBFF\uDFFE"`, nil, fingerprint.ErrNoncharacter, ""},
		{"noncharacter outside the key fields is still refused", "t", `{"tenant_id":1,"n":"\uffff"}`, []string{"tenant_id"}, fingerprint.ErrNoncharacter, ""},
		{"leading byte order mark", "t", "\ufeff{}", nil, fingerprint.ErrInvalidJSON,
			`args: invalid JSON at byte 0: expected a value, found '\u00ef'`},
		{"duplicate name", "t", `{"a":{"b":[1,{"c":1,"c":2}]}}`, nil, fingerprint.ErrDuplicateName,
			`args.a.b[1].c: duplicate member name "c"; names must be unique (I-JSON)`},
		{"duplicate after unescaping", "t", `{"\u0061":1,"a":2}`, nil, fingerprint.ErrDuplicateName,
			`args.a: duplicate member name "a"; names must be unique (I-JSON)`},
		{"invalid UTF-8", "t", "{\"name\":\"caf\xe9\"}", nil, fingerprint.ErrInvalidUTF8,
			"args.name: invalid UTF-8 byte 0xe9 at byte 12 in a string"},
		{"invalid UTF-8 in a name", "t", "{\"\xff\":1}", nil, fingerprint.ErrInvalidUTF8,
			"args: invalid UTF-8 byte 0xff at byte 2 in a string"},
		{"UTF-8 encoded surrogate", "t", "[\"\xed\xa0\x80\"]", nil, fingerprint.ErrInvalidUTF8, ""},
		{"lone high surrogate", "t", `{"s":"\ud800"}`, nil, fingerprint.ErrLoneSurrogate,
			`args.s: lone surrogate \ud800 at byte 6; a surrogate escape must be a high-low pair`},
		{"lone low surrogate", "t", `["\udc00"]`, nil, fingerprint.ErrLoneSurrogate, ""},
		{"high surrogate then non-surrogate", "t", `["\ud800\u0041"]`, nil, fingerprint.ErrLoneSurrogate, ""},
		{"overflow to infinity", "t", `{"x":[1e400]}`, nil, fingerprint.ErrNonFinite,
			"args.x[0]: number 1e400 overflows to infinity; JSON numbers must fit an IEEE 754 double"},
		{"NaN literal", "t", `[NaN]`, nil, fingerprint.ErrInvalidJSON, ""},
		{"Infinity literal", "t", `[-Infinity]`, nil, fingerprint.ErrInvalidJSON, ""},
		{"leading zero", "t", `[01]`, nil, fingerprint.ErrInvalidJSON, ""},
		{"trailing comma", "t", `{"a":1,}`, nil, fingerprint.ErrInvalidJSON,
			"args: invalid JSON at byte 7: expected a member name in double quotes, found '}'"},
		{"truncated", "t", `{"a":[1,2`, nil, fingerprint.ErrInvalidJSON,
			"args.a[1]: invalid JSON at byte 9: unexpected end of input, expected ',' or ']'"},
		{"two values", "t", `{} {}`, nil, fingerprint.ErrInvalidJSON, ""},
		{"empty", "t", ``, nil, fingerprint.ErrInvalidJSON, "args: invalid JSON at byte 0: empty input, expected a JSON value"},
		{"raw control character", "t", "[\"a\nb\"]", nil, fingerprint.ErrInvalidJSON, ""},
		{"bad escape", "t", `["\x41"]`, nil, fingerprint.ErrInvalidJSON, ""},
		{"too deep", "t", strings.Repeat("[", fingerprint.MaxDepth+1) + strings.Repeat("]", fingerprint.MaxDepth+1), nil, fingerprint.ErrTooDeep,
			"args[0][0][0][0][0][0][0][0][0][0][0][0]…(976 more)…[0][0][0][0][0][0][0][0][0][0][0][0]: arrays and objects nest deeper than 1000 levels"},
		{"objects too deep", "t", strings.Repeat(`{"a":`, fingerprint.MaxDepth) + "{}" + strings.Repeat("}", fingerprint.MaxDepth), nil, fingerprint.ErrTooDeep, ""},
		{"too deep below the selected key field", "t", `{"tenant_id":1,"x":` + strings.Repeat("[", fingerprint.MaxDepth) + strings.Repeat("]", fingerprint.MaxDepth) + "}", []string{"tenant_id"}, fingerprint.ErrTooDeep, ""},
		{"empty type", "", `{}`, nil, fingerprint.ErrInvalidType,
			"type: empty; a job type is 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit"},
		{"type starts with a dash", "-x", `{}`, nil, fingerprint.ErrInvalidType, ""},
		{"type with a space", "send email", `{}`, nil, fingerprint.ErrInvalidType, ""},
		{"type too long", strings.Repeat("a", 129), `{}`, nil, fingerprint.ErrInvalidType, ""},
		{"missing key field", "t", `{"tenant":1}`, []string{"tenant_id"}, fingerprint.ErrMissingKeyField,
			`args.tenant_id: key field "tenant_id" is missing; every key field must be present in args`},
		{"key fields on an array", "t", `[1,2]`, []string{"tenant_id"}, fingerprint.ErrKeyFieldsNotObject,
			"args: key fields [tenant_id] select members of an object, but args is an array"},
		{"key fields on a broken array reports the break", "t", `[1,`, []string{"tenant_id"}, fingerprint.ErrInvalidJSON, ""},
		{"unsafe integer outside the key fields is still refused", "t", `{"tenant_id":1,"n":9007199254740993}`, []string{"tenant_id"}, fingerprint.ErrUnsafeInteger, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fp, err := fingerprint.FromJSON(tt.jobType, []byte(tt.args), tt.keyFields...)
			if err == nil {
				t.Fatalf("FromJSON accepted %q: %s", tt.args, fp)
			}
			if !errors.Is(err, tt.kind) {
				t.Fatalf("FromJSON error %q is not %v", err, tt.kind)
			}
			var fe *fingerprint.Error
			if !errors.As(err, &fe) || fe.Code() == "" {
				t.Fatalf("error %q is not a *fingerprint.Error with a code", err)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("message\n got %s\nwant %s", err, tt.msg)
			}
		})
	}
}

func TestEquivalentArgsAgree(t *testing.T) {
	t.Parallel()
	groups := []struct {
		keyFields []string
		docs      []string
	}{
		{nil, []string{`{"b":1,"a":2.0}`, `{"a":2,"b":1e0}`, ` { "a" : 2E0 , "b" : 0.1e1 } `, `{"\u0061":20e-1,"b":1}`}},
		{nil, []string{`"\u00e9"`, `"é"`, `"\u00E9"`}},
		{nil, []string{`"\ud83d\ude00"`, `"😀"`}},
		{[]string{"tenant_id"}, []string{`{"tenant_id":42,"order":1}`, `{"order":2,"tenant_id":42.0}`, `{"tenant_id":42}`}},
		{[]string{"tenant_id", "period"}, []string{`{"tenant_id":"t1","period":"2026-08","x":1}`, `{"period":"2026-08","tenant_id":"t1"}`}},
	}
	for _, g := range groups {
		want, err := fingerprint.FromJSON("recompute", []byte(g.docs[0]), g.keyFields...)
		if err != nil {
			t.Fatalf("FromJSON(%s): %v", g.docs[0], err)
		}
		for _, d := range g.docs[1:] {
			got, err := fingerprint.FromJSON("recompute", []byte(d), g.keyFields...)
			if err != nil {
				t.Fatalf("FromJSON(%s): %v", d, err)
			}
			if got != want {
				t.Errorf("FromJSON(%s) = %s, FromJSON(%s) = %s; equivalent args must agree", g.docs[0], want, d, got)
			}
		}
	}
	// Reversed key-field order and repeats select the same members.
	a, _ := fingerprint.FromJSON("t", []byte(`{"a":1,"b":2,"c":3}`), "a", "b")
	b, _ := fingerprint.FromJSON("t", []byte(`{"a":1,"b":2,"c":3}`), "b", "a", "b")
	if a != b {
		t.Errorf("key field order changed the fingerprint: %s vs %s", a, b)
	}
}

func TestDifferentInputsDiffer(t *testing.T) {
	t.Parallel()
	seen := map[fingerprint.Fingerprint]string{}
	add := func(typ, args string) {
		fp, err := fingerprint.FromJSON(typ, []byte(args))
		if err != nil {
			t.Fatalf("FromJSON(%s, %s): %v", typ, args, err)
		}
		if prev, ok := seen[fp]; ok {
			t.Errorf("%s %s collides with %s", typ, args, prev)
		}
		seen[fp] = typ + " " + args
	}
	add("a", `{}`)
	add("b", `{}`)
	add("a", `[]`)
	add("a", `{"x":1}`)
	add("a", `{"x":"1"}`)
	add("a", `{"x":9007199254740992}`)
	add("a", `{"x":9007199254740991}`)
	add("a", `null`)
	add("a", `""`)
}

func TestFingerprintText(t *testing.T) {
	t.Parallel()
	fp, err := fingerprint.FromJSON("recompute_financials", []byte(`{"tenant_id":42}`))
	if err != nil {
		t.Fatal(err)
	}
	// The formula by hand: SHA-256 of "fp1" LF type LF canonical args.
	if want := sha256.Sum256([]byte("fp1\nrecompute_financials\n{\"tenant_id\":42}")); fp != want {
		t.Fatalf("FromJSON = %s, want %x", fp, want)
	}
	s := fp.String()
	if len(s) != 64 || strings.ToLower(s) != s {
		t.Fatalf("String() = %q, want 64 lowercase hex digits", s)
	}
	back, err := fingerprint.Parse(s)
	if err != nil || back != fp {
		t.Fatalf("Parse(String()) = %s, %v", back, err)
	}
	if _, err := fingerprint.Parse("xyz"); !errors.Is(err, fingerprint.ErrInvalidFingerprint) {
		t.Errorf("Parse(xyz) error = %v", err)
	}
	js, _ := json.Marshal(struct{ F fingerprint.Fingerprint }{fp})
	if string(js) != `{"F":"`+s+`"}` {
		t.Errorf("JSON form = %s", js)
	}
	var round struct{ F fingerprint.Fingerprint }
	if err := json.Unmarshal(js, &round); err != nil || round.F != fp {
		t.Errorf("JSON round trip = %v, %v", round.F, err)
	}
}

func TestOfGoValues(t *testing.T) {
	t.Parallel()
	type order struct {
		TenantID int      `json:"tenant_id"`
		Items    []string `json:"items,omitempty"`
		Note     string   `json:"note"`
	}
	fromStruct, err := fingerprint.Of("sync", order{TenantID: 7, Note: "<b>&"})
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := fingerprint.FromJSON("sync", []byte(`{"note":"\u003cb\u003e\u0026","tenant_id":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if fromStruct != fromJSON {
		t.Errorf("Of(struct) = %s, FromJSON = %s", fromStruct, fromJSON)
	}
	fromMap, err := fingerprint.Of("sync", map[string]any{"tenant_id": 7.0, "note": "<b>&"})
	if err != nil || fromMap != fromJSON {
		t.Errorf("Of(map) = %s, %v; want %s", fromMap, err, fromJSON)
	}
	if _, err := fingerprint.Of("sync", map[string]string{"x": "\xff"}); !errors.Is(err, fingerprint.ErrInvalidUTF8) {
		t.Errorf("invalid UTF-8 in a Go string: err = %v, want ErrInvalidUTF8", err)
	}
	if _, err := fingerprint.Of("sync", []float64{1, 2, nan()}); !errors.Is(err, fingerprint.ErrNonFinite) {
		t.Errorf("NaN: err = %v, want ErrNonFinite", err)
	}
	if _, err := fingerprint.Of("sync", map[string]uint64{"id": 1 << 60}); !errors.Is(err, fingerprint.ErrUnsafeInteger) {
		t.Errorf("uint64 1<<60: err = %v, want ErrUnsafeInteger", err)
	}
	// The same value as a float64 is written with its shortest digits.
	if _, err := fingerprint.Of("sync", map[string]float64{"id": 1 << 60, "big": 1e21}); err != nil {
		t.Errorf("float64 1<<60 and 1e21: %v", err)
	}
	if _, err := fingerprint.Of("sync", []string{"ok", "\uFFFE"}); !errors.Is(err, fingerprint.ErrNoncharacter) {
		t.Errorf("noncharacter in a Go string: err = %v, want ErrNoncharacter", err)
	}
}

func nan() float64 { var z float64; return z / z }

// TestAgainstLibraries checks the canonical form against two independent
// RFC 8785 implementations on documents they accept and we accept.
func TestAgainstLibraries(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001,-0,5e-324,1.7976931348623157e308]}`,
		`{"\ue000":1,"\ud83d\ude00":2,"\u0080":3,"a":{"\ufffd":[],"\ud800\udc00":{},"\ufdcf":0,"\ufdf0":0}}`,
		`["\u0000\u001f\u007f\u2028\"\\\/", 0.1, 1e21, 1e-7, 1.2345678901234568e20]`,
		`[1000000000000000000000,9007199254740992.0,9.007199254740994e15,1.5e300,1152921504606847000,123000000000000000000000,9007199254740993.5]`,
		`{"z":{"y":{"x":[{"b":1,"a":2},{"d":[3,{"f":4,"e":5}]}]}}}`,
	}
	for _, d := range docs {
		ours, err := fingerprint.Canonicalize([]byte(d))
		if err != nil {
			t.Fatalf("Canonicalize(%s): %v", d, err)
		}
		v := jsontext.Value(d)
		if err := v.Canonicalize(); err != nil {
			t.Fatalf("jsontext: %v", err)
		}
		if string(ours) != string(v) {
			t.Errorf("jsontext disagrees on %s\n ours %s\ntheirs %s", d, ours, v)
		}
		theirs, err := jcs.Transform([]byte(d))
		if err != nil {
			t.Fatalf("jcs: %v", err)
		}
		if string(ours) != string(theirs) {
			t.Errorf("gowebpki/jcs disagrees on %s\n ours %s\ntheirs %s", d, ours, theirs)
		}
	}
}

// vectorFile is the shape of testdata/fp1-vectors.json.
type vectorFile struct {
	Spec       string   `json:"spec"`
	Version    int      `json:"version"`
	ErrorKinds []string `json:"error_kinds"`
	Vectors    []struct {
		Name        string   `json:"name"`
		Type        string   `json:"type"`
		ArgsText    *string  `json:"args_text"`
		ArgsBase64  *string  `json:"args_base64"`
		KeyFields   []string `json:"key_fields"`
		Canonical   *string  `json:"canonical"`
		Fingerprint string   `json:"fingerprint"`
		Error       string   `json:"error"`
	} `json:"vectors"`
}

func TestVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/fp1-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatalf("testdata/fp1-vectors.json: %v", err)
	}
	if vf.Spec != "fp1" || vf.Version != 2 || len(vf.Vectors) < 40 {
		t.Fatalf("vector file: spec %q version %d with %d vectors, want fp1 version 2 with at least 40", vf.Spec, vf.Version, len(vf.Vectors))
	}
	// The published kinds are exactly the kinds this package can return.
	if want := fingerprint.KindCodes(); !slices.Equal(vf.ErrorKinds, want) {
		t.Errorf("vector file error_kinds %v, want %v", vf.ErrorKinds, want)
	}
	kinds := map[string]int{}
	for _, v := range vf.Vectors {
		var args []byte
		switch {
		case v.ArgsText != nil:
			args = []byte(*v.ArgsText)
		case v.ArgsBase64 != nil:
			if args, err = base64.StdEncoding.DecodeString(*v.ArgsBase64); err != nil {
				t.Fatalf("%s: args_base64: %v", v.Name, err)
			}
		default:
			t.Fatalf("%s: neither args_text nor args_base64", v.Name)
		}
		fp, err := fingerprint.FromJSON(v.Type, args, v.KeyFields...)
		if v.Error != "" {
			kinds[v.Error]++
			if got := fingerprint.Code(err); got != v.Error {
				t.Errorf("%s: got %v (code %q), want error kind %q", v.Name, err, got, v.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: unexpected error %v", v.Name, err)
			continue
		}
		if fp.String() != v.Fingerprint {
			t.Errorf("%s: fingerprint %s, want %s", v.Name, fp, v.Fingerprint)
		}
		if v.Canonical != nil {
			canon, err := fingerprint.Canonicalize(args, v.KeyFields...)
			if err != nil || string(canon) != *v.Canonical {
				t.Errorf("%s: canonical %s (%v), want %s", v.Name, canon, err, *v.Canonical)
			}
		}
	}
	for _, k := range vf.ErrorKinds {
		if kinds[k] == 0 {
			t.Errorf("no vector exercises error kind %q", k)
		}
	}
}
