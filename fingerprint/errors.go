package fingerprint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors, one per kind of rejected input. Every error returned by this
// package wraps exactly one of them; match with errors.Is.
var (
	ErrInvalidType   = errors.New("fingerprint: invalid job type")
	ErrInvalidJSON   = errors.New("fingerprint: invalid JSON") // also a leading byte order mark
	ErrDuplicateName = errors.New("fingerprint: duplicate member name")
	ErrInvalidUTF8   = errors.New("fingerprint: invalid UTF-8")
	ErrLoneSurrogate = errors.New("fingerprint: lone surrogate")
	// ErrNoncharacter: U+FDD0-U+FDEF or U+xFFFE/U+xFFFF, raw or escaped.
	ErrNoncharacter = errors.New("fingerprint: noncharacter")
	ErrNonFinite    = errors.New("fingerprint: number is not finite")
	// ErrUnsafeInteger: a number whose value is an integer beyond ±2^53, in
	// any form (9007199254740993, 9007199254740993.0, 9.007199254740993e15),
	// that is not spelled with its double's shortest digits.
	ErrUnsafeInteger      = errors.New("fingerprint: integer beyond 2^53")
	ErrMissingKeyField    = errors.New("fingerprint: missing key field")
	ErrKeyFieldsNotObject = errors.New("fingerprint: key fields need an object")
	ErrTooDeep            = errors.New("fingerprint: nesting too deep") // more than MaxDepth levels
)

// kindCodes are the stable names of the error kinds, as used in the published
// test vectors (testdata/fp1-vectors.json) and in the daemon's error codes.
var kindCodes = []struct {
	err  error
	code string
}{
	{ErrInvalidType, "invalid_type"},
	{ErrInvalidJSON, "invalid_json"},
	{ErrDuplicateName, "duplicate_name"},
	{ErrInvalidUTF8, "invalid_utf8"},
	{ErrLoneSurrogate, "lone_surrogate"},
	{ErrNoncharacter, "noncharacter"},
	{ErrNonFinite, "non_finite"},
	{ErrUnsafeInteger, "unsafe_integer"},
	{ErrMissingKeyField, "missing_key_field"},
	{ErrKeyFieldsNotObject, "key_fields_not_object"},
	{ErrTooDeep, "too_deep"},
}

// Code returns the stable snake_case name of the kind of err ("unsafe_integer",
// "duplicate_name", ...), or "" when err is not from this package.
func Code(err error) string {
	for _, k := range kindCodes {
		if errors.Is(err, k.err) {
			return k.code
		}
	}
	return ""
}

// Error describes rejected input: the kind (a sentinel above), where it is (a
// path such as args.user.id or args.items[3], or "type"), and what is wrong.
type Error struct {
	Kind error  // one of the sentinel errors
	Path string // "type", "args", "args.user.id", `args["a b"]`, "args.items[3]"
	Msg  string // what is wrong and, where it helps, what to do
}

func (e *Error) Error() string { return e.Path + ": " + e.Msg }

// Unwrap returns the sentinel kind so errors.Is works.
func (e *Error) Unwrap() error { return e.Kind }

// Code returns the stable name of the error kind, e.g. "unsafe_integer".
func (e *Error) Code() string { return Code(e.Kind) }

// quoteSnippet shortens hostile input (a number of ten megabytes) before it is
// echoed in a message.
func quoteSnippet(b []byte) string {
	const limit = 40
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}

// pathElem is one step of the path to the value being read: an object member
// (the span of its raw, still escaped, name in the input; nameStart -1 for the
// extra name passed to formatPath) or an array index.
type pathElem struct {
	nameStart, nameEnd int32
	index              int32
	isIdx              bool
}

// maxPathElems bounds a path in a message: deeper paths keep their first and
// last steps around an ellipsis, so hostile nesting cannot bloat an error.
const maxPathElems = 24

func formatPath(in, extra []byte, elems []pathElem) string {
	var b strings.Builder
	b.WriteString("args")
	for i, e := range elems {
		if len(elems) > maxPathElems && i >= maxPathElems/2 && i < len(elems)-maxPathElems/2 {
			if i == maxPathElems/2 {
				fmt.Fprintf(&b, "…(%d more)…", len(elems)-maxPathElems)
			}
			continue
		}
		if e.isIdx {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(int(e.index)))
			b.WriteByte(']')
			continue
		}
		raw := extra
		if e.nameStart >= 0 {
			raw = in[e.nameStart:e.nameEnd]
		}
		name := decodeNameForPath(raw)
		if isIdent(name) {
			b.WriteByte('.')
			b.WriteString(name)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Quote(name))
			b.WriteByte(']')
		}
	}
	return b.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// decodeNameForPath unescapes a raw member name for an error message. The
// name has already been validated when this is called for a value inside it;
// anything odd is shown as is.
func decodeNameForPath(raw []byte) string {
	s, err := strconv.Unquote(`"` + string(raw) + `"`)
	if err != nil {
		return string(raw)
	}
	return s
}
