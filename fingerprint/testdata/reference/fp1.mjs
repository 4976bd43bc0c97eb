// Reference implementation of the "fp1" fingerprint (dependency-free, Node >= 20, ESM).
//
//   fp1(type, args) = lowercase hex( SHA-256( "fp1" LF type LF JCS(args) ) )
//
// JCS is RFC 8785. args must be I-JSON (RFC 7493); this file does its own strict
// parsing so that every rejection has a well-defined error kind.

import { createHash } from 'node:crypto';

export const ERROR_KINDS = [
  'invalid_type',
  'invalid_json',
  'duplicate_name',
  'invalid_utf8',
  'lone_surrogate',
  'non_finite',
  'unsafe_integer',
  'missing_key_field',
  'key_fields_not_object',
];

export class Fp1Error extends Error {
  constructor(kind, message) {
    super(`${kind}: ${message}`);
    this.kind = kind;
  }
}

const TYPE_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const MAX_SAFE_MAGNITUDE = 2n ** 53n; // 9007199254740992 itself is allowed
const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
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

  function object() {
    expect('{');
    const members = new Map();
    ws();
    if (text[i] === '}') {
      i++;
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
      return members;
    }
  }

  function array() {
    expect('[');
    const items = [];
    ws();
    if (text[i] === ']') {
      i++;
      return items;
    }
    for (;;) {
      items.push(value());
      ws();
      if (text[i] === ',') { i++; continue; }
      expect(']');
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
      if (c !== '\\') { out += c; i++; continue; } // raw text is valid UTF-8, hence well-formed UTF-16
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
        out += String.fromCharCode(u, lo);
        continue;
      }
      out += String.fromCharCode(u);
    }
  }

  function number() {
    NUMBER_RE.lastIndex = i;
    const m = NUMBER_RE.exec(text);
    if (!m) fail('invalid_json', 'bad number');
    const literal = m[0];
    const isInteger = m[1] === undefined && m[2] === undefined;
    if (isInteger) {
      // Beyond 2^53 an integer literal is refused unless it is already the
      // ECMAScript form of the double it denotes (e.g. 100000000000000000000,
      // the canonical form of 1e20): anything else would round and collide.
      const big = BigInt(literal);
      if ((big < 0n ? -big : big) > MAX_SAFE_MAGNITUDE && JSON.stringify(Number(literal)) !== literal) {
        fail('unsafe_integer', `integer ${literal} exceeds 2^53 and would read as ${JSON.stringify(Number(literal))}`);
      }
    }
    const v = Number(literal); // correctly rounded decimal -> double
    if (!Number.isFinite(v)) fail('non_finite', `number ${literal} overflows to infinity`);
    i += literal.length;
    return v;
  }

  const v = value();
  ws();
  if (i !== text.length) fail('invalid_json', 'trailing data after JSON value');
  return v;
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
