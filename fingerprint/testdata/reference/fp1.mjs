// Reference implementation of the "fp1" fingerprint (dependency-free, Node >= 20, ESM).
//
//   fp1(type, args) = lowercase hex( SHA-256( "fp1" LF type LF JCS(args) ) )
//
// JCS is RFC 8785. args must be I-JSON (RFC 7493); this file does its own strict
// parsing so that every rejection has a well-defined error kind. Besides the
// I-JSON rules (unique names, valid UTF-8, no lone surrogates, no
// noncharacters, finite numbers) fp1 refuses:
//   - nesting deeper than MAX_DEPTH arrays/objects (the outermost is level 1);
//   - a number whose exact value is an integer beyond 2^53 in magnitude, in
//     any form (9007199254740993, 9007199254740993.0, 9.007199254740993e15),
//     unless its significant digits (leading and trailing zeros dropped, the
//     decimal point ignored) are exactly the shortest round-trip digits of the
//     double it denotes (9007199254740994, 1e20, 1000000000000000000000,
//     1.5e300). Any other such literal rounds to a double that another integer
//     names too, and would collide with it. Non-integers are not affected.

import { createHash } from 'node:crypto';

export const ERROR_KINDS = [
  'invalid_type',
  'invalid_json',
  'duplicate_name',
  'invalid_utf8',
  'lone_surrogate',
  'noncharacter',
  'non_finite',
  'unsafe_integer',
  'missing_key_field',
  'key_fields_not_object',
  'too_deep',
];

export const MAX_DEPTH = 1000; // arrays and objects; 1000 levels pass, 1001 do not

export class Fp1Error extends Error {
  constructor(kind, message) {
    super(`${kind}: ${message}`);
    this.kind = kind;
  }
}

const TYPE_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const TWO_TO_53 = 2 ** 53;
const NUMBER_RE = /-?(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?/y;

// Noncharacters (RFC 7493 section 2.1): U+FDD0..U+FDEF and U+xFFFE, U+xFFFF.
export const isNoncharacter = (cp) => (cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) === 0xfffe;
const hexCp = (cp) => 'U+' + cp.toString(16).toUpperCase().padStart(4, '0');
const HEX4_RE = /^[0-9A-Fa-f]{4}$/;
const SHORT_ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

// ---------------------------------------------------------------------------
// Strict I-JSON parser.
// Result values: objects -> Map(name -> value), arrays -> Array, strings,
// numbers (finite doubles), true, false, null.
// ---------------------------------------------------------------------------

export function parseIJson(bytes) {
  let text;
  try {
    // ignoreBOM: keep a leading U+FEFF in the text (it is then not valid JSON).
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new Fp1Error('invalid_utf8', 'input is not valid UTF-8');
  }

  let i = 0;
  let depth = 0;
  const fail = (kind, msg) => {
    throw new Fp1Error(kind, `${msg} at offset ${i} (UTF-16 units)`);
  };
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  const expect = (ch) => {
    if (text[i] !== ch) fail('invalid_json', `expected '${ch}'`);
    i++;
  };

  function value() {
    ws();
    const c = text[i];
    if (c === '{') return object();
    if (c === '[') return array();
    if (c === '"') return string();
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    return fail('invalid_json', 'expected a JSON value');
  }

  const enter = () => {
    if (++depth > MAX_DEPTH) fail('too_deep', `arrays and objects nest deeper than ${MAX_DEPTH} levels`);
  };

  function object() {
    enter();
    expect('{');
    const members = new Map();
    ws();
    if (text[i] === '}') {
      i++;
      depth--;
      return members;
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail('invalid_json', 'expected a member name');
      const name = string(); // names are compared after unescaping
      if (members.has(name)) fail('duplicate_name', `duplicate member name ${JSON.stringify(name)}`);
      ws();
      expect(':');
      members.set(name, value());
      ws();
      if (text[i] === ',') { i++; continue; }
      expect('}');
      depth--;
      return members;
    }
  }

  function array() {
    enter();
    expect('[');
    const items = [];
    ws();
    if (text[i] === ']') {
      i++;
      depth--;
      return items;
    }
    for (;;) {
      items.push(value());
      ws();
      if (text[i] === ',') { i++; continue; }
      expect(']');
      depth--;
      return items;
    }
  }

  function hex4() {
    const h = text.slice(i, i + 4);
    if (!HEX4_RE.test(h)) fail('invalid_json', 'bad \\u escape');
    i += 4;
    return parseInt(h, 16);
  }

  function string() {
    expect('"');
    let out = '';
    for (;;) {
      if (i >= text.length) fail('invalid_json', 'unterminated string');
      const c = text[i];
      if (c === '"') { i++; return out; }
      if (c < ' ') fail('invalid_json', 'raw control character in string');
      if (c !== '\\') { // raw text is valid UTF-8, hence well-formed UTF-16
        const cp = text.codePointAt(i);
        if (isNoncharacter(cp)) fail('noncharacter', `noncharacter ${hexCp(cp)} in a string`);
        const n = cp > 0xffff ? 2 : 1;
        out += text.slice(i, i + n);
        i += n;
        continue;
      }
      i++;
      const e = text[i];
      if (e in SHORT_ESCAPES) { out += SHORT_ESCAPES[e]; i++; continue; }
      if (e !== 'u') fail('invalid_json', 'bad escape');
      i++;
      const u = hex4();
      if (u >= 0xdc00 && u <= 0xdfff) fail('lone_surrogate', 'low surrogate escape without high surrogate');
      if (u >= 0xd800 && u <= 0xdbff) {
        // must be immediately followed by an escaped low surrogate
        if (!text.startsWith('\\u', i)) fail('lone_surrogate', 'high surrogate escape not followed by \\u');
        i += 2;
        const lo = hex4();
        if (lo < 0xdc00 || lo > 0xdfff) fail('lone_surrogate', 'high surrogate escape not followed by low surrogate');
        const cp = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        if (isNoncharacter(cp)) fail('noncharacter', `noncharacter ${hexCp(cp)} escaped in a string`);
        out += String.fromCharCode(u, lo);
        continue;
      }
      if (isNoncharacter(u)) fail('noncharacter', `noncharacter ${hexCp(u)} escaped in a string`);
      out += String.fromCharCode(u);
    }
  }

  function number() {
    NUMBER_RE.lastIndex = i;
    const m = NUMBER_RE.exec(text);
    if (!m) fail('invalid_json', 'bad number');
    const [literal, intPart, frac = '', exp] = m;
    const isIntegerLiteral = m[2] === undefined && exp === undefined;
    // A '.' or exponent without digits is malformed here, before any check
    // of the value of the digits before it (as a single-pass parser sees it).
    const next = text[i + literal.length];
    if ((next === '.' && m[2] === undefined) || ((next === 'e' || next === 'E') && exp === undefined)) {
      fail('invalid_json', 'bad number');
    }
    const v = Number(literal); // correctly rounded decimal -> double
    if (!Number.isFinite(v)) {
      // An integer literal too large for a double is an unsafe integer, like
      // any other beyond 2^53; a fraction or exponent form overflows.
      if (isIntegerLiteral) fail('unsafe_integer', `integer ${literal} exceeds 2^53 and overflows a double`);
      fail('non_finite', `number ${literal} overflows to infinity`);
    }
    if (Math.abs(v) >= TWO_TO_53 && !shortestIntegerDigits(intPart, frac, exp, v)) {
      const what = isIntegerLiteral ? `integer ${literal} exceeds 2^53` : `number ${literal} denotes an integer beyond 2^53`;
      fail('unsafe_integer', `${what} and would read as ${JSON.stringify(v)}`);
    }
    i += literal.length;
    return v;
  }

  const v = value();
  ws();
  if (i !== text.length) fail('invalid_json', 'trailing data after JSON value');
  return v;
}

// The rule for numbers beyond 2^53, for a literal whose double v is at least
// 2^53 in magnitude (no value below 2^53 can round to one, so smaller doubles
// need no check): true when the literal's exact value is not an integer, or
// when its significant digits are exactly v's shortest round-trip digits.
function shortestIntegerDigits(intPart, frac, exp, v) {
  const mantissa = intPart + frac;
  const sig = mantissa.replace(/^0+/, '').replace(/0+$/, '');
  if (sig === '') return true; // zero
  const trailingZeros = mantissa.length - mantissa.replace(/0+$/, '').length;
  // exact value = sig * 10^k; exponents here are small enough for a Number
  const k = (exp === undefined ? 0 : parseInt(exp, 10)) - frac.length + trailingZeros;
  if (k < 0) return true; // not an integer
  // Number::toString gives the shortest round-trip digits (the closest such
  // when several are equally short), padded with zeros below 1e21.
  const shortest = String(Math.abs(v)).split('e')[0].replace('.', '').replace(/0+$/, '');
  return sig === shortest;
}

// ---------------------------------------------------------------------------
// RFC 8785 serialisation.
// JSON.stringify(number) is exactly ECMAScript Number::toString for finite
// numbers ("-0" -> "0"), which is what RFC 8785 requires.
// JSON.stringify(string) escapes only '"', '\\' and U+0000-U+001F (short forms
// \b \t \n \f \r, otherwise \u00xx lowercase) and lone surrogates; the latter
// cannot occur here because the parser rejects them. gen-vectors.mjs checks
// this equivalence against a hand-written escaper for every BMP code point.
// Member names are ordered with '<' on JS strings, i.e. by UTF-16 code units.
// ---------------------------------------------------------------------------

export function jcs(v) {
  if (v === null) return 'null';
  if (v === true) return 'true';
  if (v === false) return 'false';
  if (typeof v === 'number') return JSON.stringify(v);
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return '[' + v.map(jcs).join(',') + ']';
  const names = [...v.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return '{' + names.map((n) => JSON.stringify(n) + ':' + jcs(v.get(n))).join(',') + '}';
}

// ---------------------------------------------------------------------------

export function fp1(type, argsBytes, keyFields) {
  if (typeof type !== 'string' || !TYPE_RE.test(type)) {
    throw new Fp1Error('invalid_type', `invalid type ${JSON.stringify(type)}`);
  }
  let args = parseIJson(argsBytes);

  if (keyFields !== undefined && keyFields.length > 0) {
    if (!(args instanceof Map)) throw new Fp1Error('key_fields_not_object', 'key_fields given but args is not an object');
    const selected = new Map();
    for (const name of new Set(keyFields)) {
      if (!args.has(name)) throw new Fp1Error('missing_key_field', `key field ${JSON.stringify(name)} not in args`);
      selected.set(name, args.get(name));
    }
    args = selected;
  }

  const canonical = jcs(args);
  const fingerprint = createHash('sha256')
    .update(Buffer.from(`fp1\n${type}\n`, 'utf8'))
    .update(Buffer.from(canonical, 'utf8'))
    .digest('hex');
  return { fingerprint, canonical };
}
