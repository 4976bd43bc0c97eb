// Package fingerprint computes fp1, the canonical fingerprint that names "the
// same work" identically in every language: SHA-256 over the job type and the
// RFC 8785 canonical form of its JSON args (or of the chosen key fields).
//
//	fp1(type, args) = lowercase hex( SHA-256( "fp1" LF type LF JCS(args) ) )
//
// Args must be I-JSON (RFC 7493): unique member names, valid UTF-8, no lone
// surrogates, no noncharacters (U+FDD0-U+FDEF and U+xFFFE, U+xFFFF in every
// plane, raw or \u-escaped, in names and values), finite numbers. A leading
// byte order mark is not JSON and is refused as invalid JSON. Arrays and
// objects may nest MaxDepth (1000) levels deep, the outermost being level 1;
// deeper input is refused.
//
// Numbers beyond 2^53: a number whose value is an integer of magnitude above
// 2^53, whatever its spelling (9007199254740993, 9007199254740993.0,
// 9.007199254740993e15), is accepted only when its significant digits (leading
// and trailing zeros dropped, decimal point ignored) are exactly the shortest
// round-trip digits of the double it denotes, as for 9007199254740994, 1e20,
// 100000000000000000000, 1000000000000000000000 (canonically 1e+21) or 1.5e300.
// Any other such number would round to a double that a different integer also
// names, and the two would collide; it is refused with ErrUnsafeInteger (send
// such ids as strings). Numbers whose value is not an integer, such as
// 9007199254740993.5 or 0.1, round to the nearest double as usual.
//
// Rejected input returns an *Error naming the JSON path, wrapping one of the
// sentinel errors. Nothing is silently normalised.
//
// The test vectors in testdata/fp1-vectors.json are the cross-language
// contract: an implementation in another language is correct when it matches
// every vector.
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"errors"
	"fmt"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"slices"
	"strconv"
	"sync"
)

// Version is the name of the fingerprint scheme, hashed into every fingerprint.
const Version = "fp1"

// MaxTypeLen is the longest job type accepted, in bytes.
const MaxTypeLen = 128

// Fingerprint is an fp1 digest. Its text form (String, MarshalText) is 64
// lowercase hex digits, which is also how it appears in JSON.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint as 64 lowercase hex digits.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// IsZero reports whether f is the zero value (no fingerprint).
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// MarshalText implements encoding.TextMarshaler (lowercase hex).
func (f Fingerprint) MarshalText() ([]byte, error) {
	return f.AppendText(make([]byte, 0, 2*len(f)))
}

// AppendText implements encoding.TextAppender (lowercase hex).
func (f Fingerprint) AppendText(b []byte) ([]byte, error) { return hex.AppendEncode(b, f[:]), nil }

// UnmarshalText implements encoding.TextUnmarshaler; see Parse.
func (f *Fingerprint) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*f = p
	return nil
}

// ErrInvalidFingerprint is returned by Parse for text that is not 64 hex digits.
var ErrInvalidFingerprint = errors.New("fingerprint: not 64 hex digits")

// Parse reads a fingerprint from its 64-hex-digit text form (either case).
func Parse(s string) (Fingerprint, error) {
	var f Fingerprint
	if len(s) != 2*len(f) {
		return f, fmt.Errorf("%w: %q has %d characters", ErrInvalidFingerprint, quoteSnippet([]byte(s)), len(s))
	}
	if _, err := hex.Decode(f[:], []byte(s)); err != nil {
		return Fingerprint{}, fmt.Errorf("%w: %q: %v", ErrInvalidFingerprint, s, err)
	}
	return f, nil
}

// ValidateType checks a job type: 1-128 bytes of [A-Za-z0-9_.:-], the first a
// letter or digit.
func ValidateType(jobType string) error {
	const rule = "a job type is 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit"
	if len(jobType) == 0 {
		return &Error{Kind: ErrInvalidType, Path: "type", Msg: "empty; " + rule}
	}
	if len(jobType) > MaxTypeLen {
		return &Error{Kind: ErrInvalidType, Path: "type", Msg: strconv.Itoa(len(jobType)) + " bytes is too long; " + rule}
	}
	for i := 0; i < len(jobType); i++ {
		c := jobType[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '_' || c == '.' || c == ':' || c == '-') {
			continue
		}
		return &Error{Kind: ErrInvalidType, Path: "type",
			Msg: strconv.Quote(quoteSnippet([]byte(jobType))) + " has " + strconv.QuoteRune(rune(c)) + " at byte " + strconv.Itoa(i) + "; " + rule}
	}
	return nil
}

// Scheme computes fingerprints for one job type and one choice of key fields.
// It is safe for concurrent use; build it once per job type and reuse it.
type Scheme struct {
	jobType   string
	keyFields []string // sorted, unique; nil means all args
}

// NewScheme validates the job type and returns a Scheme that fingerprints its
// args, or only the listed top-level key fields of them when keyFields is not
// empty. The order of keyFields does not matter and repeats count once.
func NewScheme(jobType string, keyFields ...string) (*Scheme, error) {
	if err := ValidateType(jobType); err != nil {
		return nil, err
	}
	s := &Scheme{jobType: jobType}
	if len(keyFields) > 0 {
		s.keyFields = slices.Compact(slices.Sorted(slices.Values(keyFields)))
	}
	return s, nil
}

// Type returns the job type the scheme was built for.
func (s *Scheme) Type() string { return s.jobType }

// KeyFields returns the key fields (sorted, without repeats), or nil when the
// whole of args is fingerprinted.
func (s *Scheme) KeyFields() []string { return slices.Clone(s.keyFields) }

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

// run canonicalizes args, appending the result to c.out.
func (s *Scheme) run(c *canonicalizer, args []byte) error {
	c.reset(args)
	if s.keyFields != nil {
		c.keyFields = s.keyFields
		c.keyFound = append(c.keyFound[:0], make([]bool, len(s.keyFields))...)
		i := bytes.IndexFunc(args, func(r rune) bool { return r != ' ' && r != '\t' && r != '\n' && r != '\r' })
		if i >= 0 && args[i] != '{' {
			if err := c.document(); err != nil { // report broken input first
				return err
			}
			return &Error{Kind: ErrKeyFieldsNotObject, Path: "args",
				Msg: fmt.Sprintf("key fields %v select members of an object, but args is %s", s.keyFields, describe(args[i]))}
		}
	}
	if err := c.document(); err != nil {
		return err
	}
	for i, found := range c.keyFound {
		if !found {
			return &Error{Kind: ErrMissingKeyField, Path: formatPath(nil, escapeForPath([]byte(s.keyFields[i])), []pathElem{{nameStart: -1}}),
				Msg: "key field " + strconv.Quote(s.keyFields[i]) + " is missing; every key field must be present in args"}
		}
	}
	return nil
}

func describe(first byte) string {
	switch {
	case first == '[':
		return "an array"
	case first == '"':
		return "a string"
	case first == 't' || first == 'f':
		return "a boolean"
	case first == 'n':
		return "null"
	default:
		return "a number"
	}
}

// FromJSON returns the fingerprint of the raw JSON args.
func (s *Scheme) FromJSON(args []byte) (Fingerprint, error) {
	c := canonicalizers.Get().(*canonicalizer)
	defer canonicalizers.Put(c)
	c.out = append(c.out[:0], Version...)
	c.out = append(c.out, '\n')
	c.out = append(c.out, s.jobType...)
	c.out = append(c.out, '\n')
	if err := s.run(c, args); err != nil {
		return Fingerprint{}, err
	}
	c.in = nil
	return sha256.Sum256(c.out), nil
}

// Of returns the fingerprint of args, a Go value encoded as encoding/json
// encodes it (struct tags, maps, slices...), except that strings holding
// invalid UTF-8 are refused rather than replaced with U+FFFD.
func (s *Scheme) Of(args any) (Fingerprint, error) {
	raw, err := marshal(args)
	if err != nil {
		return Fingerprint{}, err
	}
	return s.FromJSON(raw)
}

// AppendCanonical appends the RFC 8785 form of args (after key-field
// selection) to dst: the exact bytes that are hashed after the prefix.
func (s *Scheme) AppendCanonical(dst, args []byte) ([]byte, error) {
	c := canonicalizers.Get().(*canonicalizer)
	defer canonicalizers.Put(c)
	c.out = c.out[:0]
	if err := s.run(c, args); err != nil {
		return dst, err
	}
	c.in = nil
	return append(dst, c.out...), nil
}

// FromJSON returns the fingerprint of the job type and raw JSON args, using only
// the top-level keyFields of args when any are given. For many events of one
// type, build a Scheme once instead.
func FromJSON(jobType string, args []byte, keyFields ...string) (Fingerprint, error) {
	s, err := NewScheme(jobType, keyFields...)
	if err != nil {
		return Fingerprint{}, err
	}
	return s.FromJSON(args)
}

// Of returns the fingerprint of the job type and args, a Go value encoded as
// encoding/json encodes it (struct tags, maps, slices...), except that strings
// holding invalid UTF-8 are refused rather than replaced with U+FFFD.
func Of(jobType string, args any, keyFields ...string) (Fingerprint, error) {
	s, err := NewScheme(jobType, keyFields...)
	if err != nil {
		return Fingerprint{}, err
	}
	return s.Of(args)
}

// Canonicalize returns the RFC 8785 canonical form of args (only keyFields of
// it when any are given), after the same checks as FromJSON.
func Canonicalize(args []byte, keyFields ...string) ([]byte, error) {
	s := &Scheme{}
	if len(keyFields) > 0 {
		s.keyFields = slices.Compact(slices.Sorted(slices.Values(keyFields)))
	}
	return s.AppendCanonical(nil, args)
}

// marshal encodes a Go value for Of with encoding/json's semantics (the v1
// options of go-json-experiment), but refusing invalid UTF-8: encoding/json
// would silently replace it, and two different values would then collide.
func marshal(v any) ([]byte, error) {
	raw, err := jsonv2.Marshal(v, jsonv1.DefaultOptionsV1(), jsontext.AllowInvalidUTF8(false))
	if err != nil {
		kind := ErrInvalidJSON
		switch {
		case strings.Contains(err.Error(), "invalid UTF-8"):
			kind = ErrInvalidUTF8
		case strings.Contains(err.Error(), "NaN") || strings.Contains(err.Error(), "Inf"):
			kind = ErrNonFinite
		}
		return nil, &Error{Kind: kind, Path: "args", Msg: "cannot encode the Go value as JSON: " + err.Error()}
	}
	return raw, nil
}
