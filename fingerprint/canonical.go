package fingerprint

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is how deeply arrays and objects may nest in args: the outermost
// array or object is level 1, so MaxDepth nested levels are accepted and
// MaxDepth+1 are refused with ErrTooDeep (scalars inside add no level), rather
// than risking the stack on hostile input.
const MaxDepth = 1000

// canonicalizer turns one JSON document into its RFC 8785 (JCS) form in a
// single pass, checking the I-JSON rules on the way: unique member names,
// valid UTF-8, no lone surrogates, no noncharacters, finite numbers, and no
// number beyond ±2^53 that denotes an integer the double cannot hold (see
// shortestIntegerDigits). It is reused through a sync.Pool, so the hot path does not
// allocate.
//
// Member order: the members of an object are written in input order, their
// spans recorded, and the object rewritten sorted by the UTF-16 code units of
// the unescaped names once it closes.
type canonicalizer struct {
	in  []byte
	pos int
	out []byte

	members []member   // stack of the members of the open objects
	names   []byte     // unescaped member names that needed unescaping
	tmp     []byte     // scratch for rewriting an object in sorted order
	path    []pathElem // where we are, for error messages
	// pathExtra is the raw name of a path element not in the input (nameStart -1).
	pathExtra []byte
	depth     int

	// keyFields, when set, keeps only these members of the top-level object.
	keyFields []string
	keyFound  []bool
}

// member is one member of an object being written: its unescaped name and the
// span of `"name":value` in out.
type member struct {
	nameStart, nameEnd int32 // in in, or in names when inNames
	start, end         int32 // span of the canonical member in out
	inNames            bool  // the name had escapes and was unescaped into names
}

func (c *canonicalizer) reset(in []byte) {
	c.in, c.pos, c.depth = in, 0, 0
	c.members = c.members[:0]
	c.names = c.names[:0]
	c.path = c.path[:0]
	c.pathExtra = nil
	c.keyFields = nil
	c.keyFound = c.keyFound[:0]
}

func (c *canonicalizer) name(m member) []byte {
	if m.inNames {
		return c.names[m.nameStart:m.nameEnd]
	}
	return c.in[m.nameStart:m.nameEnd]
}

func (c *canonicalizer) fail(kind error, msg string) error {
	return &Error{Kind: kind, Path: formatPath(c.in, c.pathExtra, c.path), Msg: msg}
}

func (c *canonicalizer) syntax(msg string) error {
	return c.fail(ErrInvalidJSON, "invalid JSON at byte "+strconv.Itoa(c.pos)+": "+msg)
}

func (c *canonicalizer) unexpected(want string) error {
	if c.pos >= len(c.in) {
		return c.syntax("unexpected end of input, expected " + want)
	}
	return c.syntax("expected " + want + ", found " + strconv.QuoteRuneToASCII(rune(c.in[c.pos])))
}

// document canonicalizes the whole input, which must hold exactly one value.
func (c *canonicalizer) document() error {
	c.skipSpace()
	if c.pos >= len(c.in) {
		return c.syntax("empty input, expected a JSON value")
	}
	if err := c.value(); err != nil {
		return err
	}
	c.skipSpace()
	if c.pos < len(c.in) {
		return c.syntax("unexpected " + strconv.QuoteRuneToASCII(rune(c.in[c.pos])) + " after the top-level value")
	}
	return nil
}

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value() error {
	if c.pos >= len(c.in) {
		return c.unexpected("a value")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object()
	case ch == '[':
		return c.array()
	case ch == '"':
		_, _, _, err := c.str(false)
		return err
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	default:
		return c.unexpected("a value")
	}
}

func (c *canonicalizer) literal(lit string) error {
	if len(c.in)-c.pos < len(lit) || string(c.in[c.pos:c.pos+len(lit)]) != lit {
		return c.syntax("invalid literal, expected " + lit)
	}
	c.out = append(c.out, lit...)
	c.pos += len(lit)
	return nil
}

func (c *canonicalizer) enter() error {
	c.depth++
	if c.depth > MaxDepth {
		return c.fail(ErrTooDeep, "arrays and objects nest deeper than "+strconv.Itoa(MaxDepth)+" levels")
	}
	return nil
}

func (c *canonicalizer) array() error {
	if err := c.enter(); err != nil {
		return err
	}
	c.pos++ // [
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		c.depth--
		return nil
	}
	c.path = append(c.path, pathElem{isIdx: true})
	for i := 0; ; i++ {
		c.path[len(c.path)-1].index = int32(i)
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.skipSpace()
		if err := c.value(); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return c.unexpected("',' or ']'")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] == ']' {
			c.pos++
			break
		}
		return c.unexpected("',' or ']'")
	}
	c.path = c.path[:len(c.path)-1]
	c.out = append(c.out, ']')
	c.depth--
	return nil
}

func (c *canonicalizer) object() error {
	if err := c.enter(); err != nil {
		return err
	}
	top := c.depth == 1
	c.pos++ // {
	objStart := len(c.out)
	c.out = append(c.out, '{')
	base := len(c.members)
	namesBase := len(c.names)
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
	} else {
		for {
			c.skipSpace()
			if c.pos >= len(c.in) || c.in[c.pos] != '"' {
				return c.unexpected("a member name in double quotes")
			}
			if len(c.members) > base {
				c.out = append(c.out, ',')
			}
			rawStart := c.pos + 1
			start := len(c.out)
			nameStart, nameEnd, inNames, err := c.str(true)
			if err != nil {
				return err
			}
			c.path = append(c.path, pathElem{nameStart: int32(rawStart), nameEnd: int32(c.pos - 1)})
			c.skipSpace()
			if c.pos >= len(c.in) || c.in[c.pos] != ':' {
				return c.unexpected("':' after the member name")
			}
			c.pos++
			c.out = append(c.out, ':')
			c.skipSpace()
			if err := c.value(); err != nil {
				return err
			}
			c.path = c.path[:len(c.path)-1]
			c.members = append(c.members, member{
				nameStart: int32(nameStart), nameEnd: int32(nameEnd), inNames: inNames,
				start: int32(start), end: int32(len(c.out)),
			})
			c.skipSpace()
			if c.pos >= len(c.in) {
				return c.unexpected("',' or '}'")
			}
			if c.in[c.pos] == ',' {
				c.pos++
				continue
			}
			if c.in[c.pos] == '}' {
				c.pos++
				break
			}
			return c.unexpected("',' or '}'")
		}
	}
	if err := c.finishObject(objStart, base, top); err != nil {
		return err
	}
	c.members = c.members[:base]
	c.names = c.names[:namesBase]
	c.depth--
	return nil
}

// finishObject sorts the members written since base by UTF-16 code units of
// their names, rejects duplicates, applies key-field selection at the top
// level, and rewrites out[objStart:] as the canonical object.
func (c *canonicalizer) finishObject(objStart, base int, top bool) error {
	ms := c.members[base:]
	sorted := true
	for i := 1; i < len(ms); i++ {
		if compareUTF16(c.name(ms[i-1]), c.name(ms[i])) >= 0 {
			sorted = false
			break
		}
	}
	if !sorted {
		c.sortMembers(ms)
		for i := 1; i < len(ms); i++ {
			if string(c.name(ms[i-1])) == string(c.name(ms[i])) {
				name := c.name(ms[i])
				c.pathExtra = escapeForPath(name)
				c.path = append(c.path, pathElem{nameStart: -1})
				return c.fail(ErrDuplicateName, "duplicate member name "+strconv.Quote(string(name))+"; names must be unique (I-JSON)")
			}
		}
	}
	selecting := top && c.keyFields != nil
	if sorted && !selecting {
		c.out = append(c.out, '}') // already canonical in place
		return nil
	}
	// Rewrite: copy the member bytes aside, then write them back in order.
	c.tmp = append(c.tmp[:0], c.out[objStart:]...)
	c.out = append(c.out[:objStart], '{')
	first := true
	for _, m := range ms {
		if selecting && !c.selectKeyField(c.name(m)) {
			continue
		}
		if !first {
			c.out = append(c.out, ',')
		}
		first = false
		c.out = append(c.out, c.tmp[int(m.start)-objStart:int(m.end)-objStart]...)
	}
	c.out = append(c.out, '}')
	return nil
}

// sortMembers sorts by name in UTF-16 order: insertion sort for the few
// members objects usually have, the standard library's stable sort past that.
func (c *canonicalizer) sortMembers(ms []member) {
	if len(ms) > 12 {
		slices.SortStableFunc(ms, func(a, b member) int { return compareUTF16(c.name(a), c.name(b)) })
		return
	}
	for i := 1; i < len(ms); i++ {
		m := ms[i]
		name := c.name(m)
		j := i
		for j > 0 && compareUTF16(c.name(ms[j-1]), name) > 0 {
			ms[j] = ms[j-1]
			j--
		}
		ms[j] = m
	}
}

// selectKeyField reports whether name is a key field and marks it found.
func (c *canonicalizer) selectKeyField(name []byte) bool {
	for i, f := range c.keyFields {
		if f == string(name) {
			c.keyFound[i] = true
			return true
		}
	}
	return false
}

// escapeForPath gives an unescaped name back the JSON escapes strconv.Unquote
// understands, so formatPath shows it as written.
func escapeForPath(name []byte) []byte {
	q := strconv.Quote(string(name))
	return []byte(q[1 : len(q)-1])
}

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units, as RFC 8785
// requires. Byte order equals code point order, which differs from UTF-16
// order only between a supplementary character (surrogate pair 0xD800-0xDFFF)
// and a BMP character in 0xE000-0xFFFF.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < 0xEE && b[i] < 0xEE {
		return int(a[i]) - int(b[i]) // neither can be U+E000.. or a 4-byte lead
	}
	// Back up to the start of the rune that differs.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	ua, ub := utf16Unit(ra), utf16Unit(rb)
	if ua != ub {
		return int(ua) - int(ub)
	}
	return int(ra) - int(rb) // same high surrogate: low surrogates follow code point order
}

func utf16Unit(r rune) rune {
	if r >= 0x10000 {
		hi, _ := utf16.EncodeRune(r)
		return hi
	}
	return r
}

// str reads a JSON string at c.pos and writes its canonical form to out. For a
// member name (isName) it also returns where the unescaped name lives: a span
// of the input when the string had no escapes, otherwise a span of c.names.
func (c *canonicalizer) str(isName bool) (start, end int, inNames bool, err error) {
	c.pos++ // opening quote
	c.out = append(c.out, '"')
	start = c.pos
	run := c.pos // start of bytes not yet copied to out
	namesStart := -1
	for {
		if c.pos >= len(c.in) {
			return 0, 0, false, c.syntax("unterminated string")
		}
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			c.out = append(c.out, c.in[run:c.pos]...)
			c.out = append(c.out, '"')
			if namesStart >= 0 {
				c.names = append(c.names, c.in[run:c.pos]...)
				c.pos++
				return namesStart, len(c.names), true, nil
			}
			c.pos++
			return start, c.pos - 1, false, nil
		case ch == '\\':
			c.out = append(c.out, c.in[run:c.pos]...)
			if isName {
				if namesStart < 0 {
					namesStart = len(c.names)
				}
				c.names = append(c.names, c.in[run:c.pos]...)
			}
			r, err := c.escape()
			if err != nil {
				return 0, 0, false, err
			}
			c.out = appendStringRune(c.out, r)
			if isName {
				c.names = utf8.AppendRune(c.names, r)
			}
			run = c.pos
		case ch < 0x20:
			return 0, 0, false, c.syntax("control character " + strconv.QuoteRuneToASCII(rune(ch)) + " in a string must be escaped")
		case ch < utf8.RuneSelf:
			c.pos++
		default:
			r, size := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError && size <= 1 {
				return 0, 0, false, c.fail(ErrInvalidUTF8, "invalid UTF-8 byte 0x"+strconv.FormatUint(uint64(ch), 16)+" at byte "+strconv.Itoa(c.pos)+" in a string")
			}
			if isNoncharacter(r) {
				return 0, 0, false, c.noncharacter(r, c.pos, nil)
			}
			c.pos += size
		}
	}
}

// escape decodes the escape sequence at c.pos (at the backslash).
func (c *canonicalizer) escape() (rune, error) {
	at := c.pos
	if c.pos+1 >= len(c.in) {
		return 0, c.syntax("unterminated escape sequence")
	}
	e := c.in[c.pos+1]
	c.pos += 2
	switch e {
	case '"':
		return '"', nil
	case '\\':
		return '\\', nil
	case '/':
		return '/', nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, ok := c.hex4()
		if !ok {
			c.pos = at
			return 0, c.syntax(`invalid \u escape, expected four hex digits`)
		}
		if !utf16.IsSurrogate(r) {
			if isNoncharacter(r) {
				return 0, c.noncharacter(r, at, c.in[at:c.pos])
			}
			return r, nil
		}
		if r < 0xDC00 && c.pos+1 < len(c.in) && c.in[c.pos] == '\\' && c.in[c.pos+1] == 'u' {
			save := c.pos
			c.pos += 2
			if lo, ok := c.hex4(); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				r = utf16.DecodeRune(r, lo)
				if isNoncharacter(r) {
					return 0, c.noncharacter(r, at, c.in[at:c.pos])
				}
				return r, nil
			}
			c.pos = save
		}
		c.pos = at
		return 0, c.fail(ErrLoneSurrogate, `lone surrogate \u`+strconv.FormatUint(uint64(r), 16)+" at byte "+strconv.Itoa(at)+"; a surrogate escape must be a high-low pair")
	default:
		c.pos = at
		return 0, c.syntax("invalid escape " + strconv.QuoteRuneToASCII(rune(e)) + " in a string")
	}
}

// isNoncharacter reports whether r is one of the 66 noncharacters I-JSON
// forbids (RFC 7493 section 2.1): U+FDD0-U+FDEF and the last two code points
// of every plane, U+FFFE U+FFFF, U+1FFFE U+1FFFF ... U+10FFFE U+10FFFF.
func isNoncharacter(r rune) bool {
	return r >= 0xFDD0 && r <= 0xFDEF || r&0xFFFE == 0xFFFE
}

// noncharacter refuses the noncharacter r found at byte at of the input, raw
// or written as the escape sequence escaped.
func (c *canonicalizer) noncharacter(r rune, at int, escaped []byte) error {
	hex := strconv.FormatUint(uint64(r), 16)
	if len(hex) < 4 {
		hex = "0000"[len(hex):] + hex
	}
	msg := "noncharacter U+" + strings.ToUpper(hex)
	if escaped != nil {
		msg += " (" + string(escaped) + ")"
	}
	msg += " at byte " + strconv.Itoa(at) + " in a string; I-JSON (RFC 7493) forbids noncharacters: remove it, or send binary data as base64"
	return c.fail(ErrNoncharacter, msg)
}

func (c *canonicalizer) hex4() (rune, bool) {
	if len(c.in)-c.pos < 4 {
		return 0, false
	}
	var r rune
	for _, h := range c.in[c.pos : c.pos+4] {
		r <<= 4
		switch {
		case h >= '0' && h <= '9':
			r |= rune(h - '0')
		case h >= 'a' && h <= 'f':
			r |= rune(h - 'a' + 10)
		case h >= 'A' && h <= 'F':
			r |= rune(h - 'A' + 10)
		default:
			return 0, false
		}
	}
	c.pos += 4
	return r, true
}

// appendStringRune writes r inside a canonical string: RFC 8785 escapes only
// '"', '\\' and the controls below U+0020 (short forms where JSON has them).
func appendStringRune(b []byte, r rune) []byte {
	switch r {
	case '"':
		return append(b, '\\', '"')
	case '\\':
		return append(b, '\\', '\\')
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(b, r)
}

// maxSafe is 2^53 written out: integer literals with more digits, or as many
// digits and a larger value, would round when read as an IEEE 754 double.
const maxSafe = "9007199254740992"

// twoTo53 is 2^53 as a double: a number whose double is smaller in magnitude
// denotes nothing beyond 2^53 (rounding is monotonic and 2^53 is exact).
const twoTo53 = 1 << 53

func (c *canonicalizer) number() error {
	start := c.pos
	neg := c.in[c.pos] == '-'
	if neg {
		c.pos++
	}
	intStart := c.pos
	switch {
	case c.pos < len(c.in) && c.in[c.pos] == '0':
		c.pos++
	case c.pos < len(c.in) && c.in[c.pos] >= '1' && c.in[c.pos] <= '9':
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
	default:
		return c.unexpected("a digit in the number")
	}
	intEnd := c.pos
	isInt := true
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		isInt = false
		c.pos++
		if !c.digits() {
			return c.unexpected("a digit after the decimal point")
		}
	}
	hasExp := false
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		isInt, hasExp = false, true
		c.pos++
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		if !c.digits() {
			return c.unexpected("a digit in the exponent")
		}
	}
	lit := c.in[start:c.pos]
	if isInt {
		if digits := c.in[intStart:intEnd]; len(digits) < len(maxSafe) || len(digits) == len(maxSafe) && string(digits) <= maxSafe {
			if len(digits) == 1 && digits[0] == '0' {
				c.out = append(c.out, '0') // -0 is 0
				return nil
			}
			// An integer literal within ±2^53 is already in its shortest form.
			c.out = append(c.out, lit...)
			return nil
		}
		return c.bigInteger(lit)
	}
	// A plain decimal of at most 15 significant digits is below 10^15 < 2^53,
	// so the rule for integers beyond 2^53 never applies to it.
	if !hasExp && appendPlainDecimal(c, lit, intStart-start, intEnd-start) {
		return nil
	}
	// unsafe.String: ParseFloat only reads the literal; it does not keep it,
	// except in an error we do not return.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if err != nil || math.IsInf(f, 0) {
		return c.fail(ErrNonFinite, "number "+quoteSnippet(lit)+" overflows to infinity; JSON numbers must fit an IEEE 754 double")
	}
	if math.Abs(f) >= twoTo53 && !shortestIntegerDigits(lit, f) {
		return c.unsafeNumber(lit, false, f, true)
	}
	c.out = appendES6Number(c.out, f)
	return nil
}

// bigInteger handles an integer literal (no fraction, no exponent) beyond
// ±2^53; see shortestIntegerDigits. Accepted, it is written in the canonical
// form of its double: 100000000000000000000 as itself, 1000000000000000000000
// as 1e+21. A literal that overflows the double is refused too.
func (c *canonicalizer) bigInteger(lit []byte) error {
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if err != nil || math.IsInf(f, 0) {
		return c.unsafeNumber(lit, true, f, false)
	}
	if !shortestIntegerDigits(lit, f) {
		return c.unsafeNumber(lit, true, f, true)
	}
	c.out = appendES6Number(c.out, f)
	return nil
}

// shortestIntegerDigits applies the rule for numbers beyond 2^53 to a number
// literal whose double f is at least 2^53 in magnitude. A literal whose exact
// decimal value is not an integer (9007199254740993.5) is not subject to it
// and passes. One whose value is an integer, in whatever form (9007199254740993,
// 9007199254740993.0, 9.007199254740993e15), passes only when its significant
// digits (leading and trailing zeros dropped, decimal point ignored) are
// exactly the shortest round-trip digits of f, as for 9007199254740994, 1e20,
// 1000000000000000000000 or 1.5e300: it is then the one canonical spelling of
// f up to zeros, point and exponent, and no other integer with such digits
// rounds to f. Any other integer literal rounds to a double that a different
// integer names too, and the two would collide, so it fails.
func shortestIntegerDigits(lit []byte, f float64) bool {
	m := lit
	if m[0] == '-' {
		m = m[1:]
	}
	exp := int64(0)
	for i, ch := range m {
		if ch != 'e' && ch != 'E' {
			continue
		}
		e, neg := m[i+1:], false
		if e[0] == '+' || e[0] == '-' {
			neg, e = e[0] == '-', e[1:]
		}
		for _, d := range e {
			if exp < 1<<40 { // saturate: f is then infinite or zero (short of a 2^40-digit mantissa)
				exp = exp*10 + int64(d-'0')
			}
		}
		if neg {
			exp = -exp
		}
		m = m[:i]
		break
	}
	// m is now the mantissa: digits with at most one '.'.
	first, last, fracLen := -1, -1, 0
	for i, ch := range m {
		switch {
		case ch == '.':
			fracLen = len(m) - i - 1
		case ch != '0':
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return true // zero; cannot happen for f >= 2^53
	}
	// The value is the significant digits m[first:last+1] times 10^k, where
	// k = exp - fracLen + the zeros written after the last significant digit.
	zeros := int64(len(m) - last - 1)
	if fracLen > 0 && last < len(m)-fracLen-1 {
		zeros-- // the '.' lies among them
	}
	if exp-int64(fracLen)+zeros < 0 {
		return true // not an integer: rounds like any other fraction
	}
	var buf [32]byte
	short := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // [-]d[.ddd]e±dd
	if short[0] == '-' {
		short = short[1:]
	}
	j := 0
	for i := first; i <= last; i++ {
		if m[i] == '.' {
			continue
		}
		if j < len(short) && short[j] == '.' {
			j++
		}
		if j >= len(short) || short[j] != m[i] {
			return false
		}
		j++
	}
	return j == len(short) || short[j] == 'e'
}

// unsafeNumber refuses a literal beyond ±2^53 that denotes an integer its
// double f cannot hold; finite says whether f is a double at all, and so has a
// canonical form that could be sent instead.
func (c *canonicalizer) unsafeNumber(lit []byte, isInt bool, f float64, finite bool) error {
	var msg string
	if isInt {
		msg = "integer " + quoteSnippet(lit) + " exceeds 2^53 and would lose precision"
	} else {
		msg = "number " + quoteSnippet(lit) + " denotes an integer beyond 2^53 and would lose precision"
	}
	if !finite {
		return c.fail(ErrUnsafeInteger, msg+"; send it as a string")
	}
	var buf [32]byte
	readsAs := string(appendES6Number(buf[:0], f))
	return c.fail(ErrUnsafeInteger, msg+" (it reads as "+readsAs+"); send it as a string, or as "+readsAs+" if that value is meant")
}

// appendPlainDecimal writes a decimal literal without exponent (such as
// 1234.50) when its canonical form is the literal itself less trailing zeros:
// with at most 15 significant digits a decimal survives the round trip
// through a double unchanged (DBL_DIG), so no shorter string can name the same
// double, and from 1e-6 up ECMAScript writes it in plain notation. Anything
// else (more digits, tiny values, zero) goes the long way.
func appendPlainDecimal(c *canonicalizer, lit []byte, intStart, intEnd int) bool {
	frac := lit[intEnd+1:] // after the '.'
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	intPart := lit[intStart:intEnd]
	sig, lead := len(frac), 0
	if len(intPart) == 1 && intPart[0] == '0' {
		for lead < len(frac) && frac[lead] == '0' {
			lead++
		}
		if lead == len(frac) || lead >= 6 { // zero, or below 1e-6
			return false
		}
		sig -= lead
	} else {
		sig += len(intPart)
	}
	if sig > 15 {
		return false
	}
	c.out = append(c.out, lit[:intEnd]...) // sign and integer part
	if len(frac) > 0 {
		c.out = append(c.out, '.')
		c.out = append(c.out, frac...)
	}
	return true
}

func (c *canonicalizer) digits() bool {
	start := c.pos
	for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
		c.pos++
	}
	return c.pos > start
}

// appendES6Number writes f as ECMAScript's Number.prototype.toString does,
// which is what RFC 8785 prescribes: shortest round-trip digits, plain
// notation for 1e-6 <= |f| < 1e21, otherwise exponent notation like 1e+21.
func appendES6Number(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // also -0
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Go writes e-07 where ECMAScript writes e-7.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
