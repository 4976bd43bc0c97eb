// Generates ../fp1-vectors.json from the cases below using ./fp1.mjs.
// Usage: node gen-vectors.mjs   (exits non-zero if any assertion fails)

import { writeFileSync } from 'node:fs';
import { fp1, jcs, ERROR_KINDS, MAX_DEPTH, isNoncharacter } from './fp1.mjs';

const j = String.raw; // JSON text written with literal backslashes
const bytes = (...parts) =>
  Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p, 'utf8') : Buffer.from(p))));

const cases = [];
// opts: key_fields, canonical (expected, asserted), same (group whose members must
// share one fingerprint), distinct (group whose members must all differ).
const ok = (name, type, args, opts = {}) => cases.push({ name, type, args, ...opts });
const err = (name, type, args, error, opts = {}) => cases.push({ name, type, args, error, ...opts });

// --- basics -----------------------------------------------------------------
ok('simple object', 'recompute_financials', '{"tenant_id":42}', { canonical: '{"tenant_id":42}', same: 'tenant' });
ok('members sorted', 't', '{"b":1,"a":2,"c":3}', { canonical: '{"a":2,"b":1,"c":3}' });
ok('empty object', 't', '{}', { canonical: '{}' });
ok('empty array', 't', '[]', { canonical: '[]' });
ok('empty object and array as members', 't', '{"b":[],"a":{}}', { canonical: '{"a":{},"b":[]}' });
ok('array order preserved', 't', '[3,1,2,"b","a"]', { canonical: '[3,1,2,"b","a"]' });
ok('top-level string', 't', '"hello"', { canonical: '"hello"' });
ok('top-level empty string', 't', '""', { canonical: '""' });
ok('top-level number', 't', '42', { canonical: '42' });
ok('top-level true', 't', 'true', { canonical: 'true' });
ok('top-level false', 't', 'false', { canonical: 'false' });
ok('top-level null', 't', 'null', { canonical: 'null' });
ok('top-level scalar surrounded by whitespace', 't', ' \t\r\n7\n ', { canonical: '7' });
ok('whitespace everywhere (same fingerprint as compact form)', 't',
  ' \t\r\n{ "b" : [ 1 , 2 , { "d" : null , "c" : true } ] ,\r\n\t"a" : "x" } \n',
  { canonical: '{"a":"x","b":[1,2,{"c":true,"d":null}]}', same: 'ws' });
ok('compact form (same fingerprint as whitespace everywhere)', 't', '{"a":"x","b":[1,2,{"c":true,"d":null}]}',
  { canonical: '{"a":"x","b":[1,2,{"c":true,"d":null}]}', same: 'ws' });
ok('members sorted at every depth', 't', '{"b":{"d":{"f":1,"e":2},"c":3},"a":[{"h":1,"g":[{"j":0,"i":1}]}]}',
  { canonical: '{"a":[{"g":[{"i":1,"j":0}],"h":1}],"b":{"c":3,"d":{"e":2,"f":1}}}' });
ok('same name in different objects is not a duplicate', 't', '{"b":{"a":2},"a":{"a":1}}', { canonical: '{"a":{"a":1},"b":{"a":2}}' });
ok('deep nesting: 100 arrays', 't', '['.repeat(100) + '1' + ']'.repeat(100), { canonical: '['.repeat(100) + '1' + ']'.repeat(100) });
{
  let t = '0', c = '0';
  for (let d = 0; d < 50; d++) { t = `{"z":${t},"a":${d}}`; c = `{"a":${d},"z":${c}}`; }
  ok('deep nesting: 50 objects, sorted at each level', 't', t, { canonical: c });
}

// --- nesting depth: the outermost array or object is level 1; scalars add none -----
{
  const arrays = (n, inner = '') => '['.repeat(n) + inner + ']'.repeat(n);
  const objects = (n) => '{"a":'.repeat(n - 1) + '{}' + '}'.repeat(n - 1);
  const mixed = (n) => '[{"a":'.repeat(n / 2 - 1) + '[{}]' + '}]'.repeat(n / 2 - 1);
  ok(`nesting depth: ${MAX_DEPTH} arrays (the limit)`, 't', arrays(MAX_DEPTH), { canonical: arrays(MAX_DEPTH) });
  ok(`nesting depth: ${MAX_DEPTH} arrays around a number`, 't', arrays(MAX_DEPTH, '1'), { canonical: arrays(MAX_DEPTH, '1') });
  ok(`nesting depth: ${MAX_DEPTH} objects (the limit)`, 't', objects(MAX_DEPTH), { canonical: objects(MAX_DEPTH) });
  ok(`nesting depth: ${MAX_DEPTH} alternating arrays and objects`, 't', mixed(MAX_DEPTH), { canonical: mixed(MAX_DEPTH) });
  err(`nesting depth: ${MAX_DEPTH + 1} arrays`, 't', arrays(MAX_DEPTH + 1), 'too_deep');
  err(`nesting depth: ${MAX_DEPTH + 1} arrays around a number`, 't', arrays(MAX_DEPTH + 1, '1'), 'too_deep');
  err(`nesting depth: ${MAX_DEPTH + 1} objects`, 't', objects(MAX_DEPTH + 1), 'too_deep');
  err(`nesting depth: ${MAX_DEPTH + 2} alternating arrays and objects`, 't', mixed(MAX_DEPTH + 2), 'too_deep');
  err(`nesting depth: ${MAX_DEPTH + 1} levels in an unselected member`, 't', `{"tenant_id":1,"x":${arrays(MAX_DEPTH)}}`, 'too_deep',
    { key_fields: ['tenant_id'] });
}

// --- type ---------------------------------------------------------------------
ok('type is part of hash: type alpha', 'alpha', '{"x":1}', { canonical: '{"x":1}', distinct: 'type' });
ok('type is part of hash: type beta', 'beta', '{"x":1}', { canonical: '{"x":1}', distinct: 'type' });
ok('type is part of hash: type Alpha (case matters)', 'Alpha', '{"x":1}', { canonical: '{"x":1}', distinct: 'type' });
ok('type of 128 characters', 'a'.repeat(128), '{}', { canonical: '{}' });
ok('type with every allowed punctuation', 'A.b:c-d_e9', '{}', { canonical: '{}' });
ok('type starting with a digit', '9lives', '{}', { canonical: '{}' });
ok('type of one character', 'x', '{}', { canonical: '{}' });

err('invalid type: empty', '', '{}', 'invalid_type');
err('invalid type: 129 characters', 'a'.repeat(129), '{}', 'invalid_type');
err('invalid type: starts with underscore', '_x', '{}', 'invalid_type');
err('invalid type: starts with hyphen', '-x', '{}', 'invalid_type');
err('invalid type: starts with dot', '.x', '{}', 'invalid_type');
err('invalid type: contains space', 'a b', '{}', 'invalid_type');
err('invalid type: contains slash', 'a/b', '{}', 'invalid_type');
err('invalid type: trailing newline', 'a\n', '{}', 'invalid_type');
err('invalid type: non-ASCII letter', 'caf\u00e9', '{}', 'invalid_type');

// --- numbers -------------------------------------------------------------------
ok('integers', 't', '[0,1,-1,42,100,-100,123456789,9007199254740991]', { canonical: '[0,1,-1,42,100,-100,123456789,9007199254740991]' });
ok('minus zero integer', 't', '-0', { canonical: '0', same: 'zero' });
ok('zero', 't', '0', { canonical: '0', same: 'zero' });
ok('minus zero forms', 't', '[-0,-0.0,0.0,0e0,-0E-5,0.000]', { canonical: '[0,0,0,0,0,0]' });
ok('1.0 is 1', 't', '1.0', { canonical: '1', same: 'one' });
ok('1 is 1', 't', '1', { canonical: '1', same: 'one' });
ok('10e-1 is 1', 't', '10e-1', { canonical: '1', same: 'one' });
ok('100', 't', '100', { canonical: '100', same: 'hundred' });
ok('1E2 is 100', 't', '1E2', { canonical: '100', same: 'hundred' });
ok('1e+2 is 100', 't', '1e+2', { canonical: '100', same: 'hundred' });
ok('100.00 is 100', 't', '100.00', { canonical: '100', same: 'hundred' });
ok('trailing zeros 4.50', 't', '4.50', { canonical: '4.5' });
ok('exponent with leading zeros', 't', '1.000E+003', { canonical: '1000' });
ok('2e-3', 't', '2e-3', { canonical: '0.002' });
ok('fraction and exponent', 't', '[123.456e3,1.5E-5,-1.5e+25,0.1,0.30000000000000004]',
  { canonical: '[123456,0.000015,-1.5e+25,0.1,0.30000000000000004]' });
ok('excess digits round to nearest double', 't', '3.141592653589793238462643383279', { canonical: '3.141592653589793' });
ok('1e20 is written in full', 't', '1e20', { canonical: '100000000000000000000', same: '1e20' });
ok('-1.2345678901234568e20 is written in full', 't', '-1.2345678901234568e20', { canonical: '-123456789012345680000', same: '-1.2345678901234568e20' });
ok('1e21 boundary: 1e21', 't', '1e21', { canonical: '1e+21', same: '1e21' });
ok('1e21 boundary: 1e+21', 't', '1e+21', { canonical: '1e+21', same: '1e21' });
ok('1e21 boundary: 1000000000000000000000.0', 't', '1000000000000000000000.0', { canonical: '1e+21', same: '1e21' });
ok('1e-7 boundary: 1e-7', 't', '1e-7', { canonical: '1e-7', same: '1e-7' });
ok('1e-7 boundary: 0.0000001', 't', '0.0000001', { canonical: '1e-7', same: '1e-7' });
ok('1e-7 boundary: 0.000001', 't', '0.000001', { canonical: '0.000001', same: '1e-6' });
ok('1e-7 boundary: 1e-6', 't', '1e-6', { canonical: '0.000001', same: '1e-6' });
ok('1e-7 boundary: 1.2345e-7 and 0.0000012345', 't', '[1.2345e-7,0.0000012345]', { canonical: '[1.2345e-7,0.0000012345]' });
ok('2^53 exactly', 't', '9007199254740992', { canonical: '9007199254740992', same: '2^53' });
ok('-2^53 exactly', 't', '-9007199254740992', { canonical: '-9007199254740992' });
ok('large exponents', 't', '[1e308,-1.5e300,1e-300,2.5e-324]', { canonical: '[1e+308,-1.5e+300,1e-300,5e-324]' });
ok('underflow to 0', 't', '1e-400', { canonical: '0' });
ok('negative underflow to 0', 't', '[-1e-400,-2e-324]', { canonical: '[0,0]' });
ok('RFC 8785 3.2.2 sample', 't',
  j`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
  { canonical: '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}' });

// RFC 8785 Appendix B: [IEEE-754 bits, input literal, expected output].
const appendixB = [
  ['0000000000000000', '0.0', '0'],
  ['8000000000000000', '-0.0', '0'],
  ['0000000000000001', '5e-324', '5e-324'],
  ['8000000000000001', '-5e-324', '-5e-324'],
  ['7fefffffffffffff', '1.7976931348623157e308', '1.7976931348623157e+308'],
  ['ffefffffffffffff', '-1.7976931348623157e+308', '-1.7976931348623157e+308'],
  ['4340000000000000', '9007199254740992', '9007199254740992'],
  ['c340000000000000', '-9007199254740992', '-9007199254740992'],
  ['4430000000000000', '2.9514790517935283e20', '295147905179352830000'],
  ['44b52d02c7e14af5', '9.999999999999997e22', '9.999999999999997e+22'],
  ['44b52d02c7e14af6', '1E23', '1e+23'],
  ['44b52d02c7e14af7', '1.0000000000000001E+23', '1.0000000000000001e+23'],
  ['444b1ae4d6e2ef4e', '999999999999999700000.0', '999999999999999700000'],
  ['444b1ae4d6e2ef4f', '9.999999999999999e20', '999999999999999900000'],
  ['444b1ae4d6e2ef50', '1000000000000000000000e0', '1e+21'],
  ['3eb0c6f7a0b5ed8c', '9.999999999999997e-7', '9.999999999999997e-7'],
  ['3eb0c6f7a0b5ed8d', '0.0000010', '0.000001'],
  ['41b3de4355555553', '333333333.3333332', '333333333.3333332'],
  ['41b3de4355555554', '333333333.33333325', '333333333.33333325'],
  ['41b3de4355555555', '333333333.33333329', '333333333.3333333'],
  ['41b3de4355555556', '333333333.3333334', '333333333.3333334'],
  ['41b3de4355555557', '333333333.33333343', '333333333.33333343'],
  ['becbf647612f3696', '-3.3333333333333333e-6', '-0.0000033333333333333333'],
  ['43143ff3c1cb0959', '1424953923781206.2', '1424953923781206.2'],
];
for (const [hex, literal, out] of appendixB) {
  const bits = Buffer.alloc(8);
  bits.writeDoubleBE(Number(literal));
  if (bits.toString('hex') !== hex) throw new Error(`Appendix B: ${literal} is not 0x${hex}`);
  ok(`RFC 8785 appendix B ${hex}: ${literal}`, 't', literal, { canonical: out });
}

err('non-finite: 1e400', 't', '1e400', 'non_finite');
err('non-finite: -1E999', 't', '-1E999', 'non_finite');
err('non-finite: nested 1e309', 't', '{"a":[0,{"b":1e309}]}', 'non_finite');
err('non-finite: just above largest double', 't', '1.7976931348623159e308', 'non_finite');
err('non-finite: 0.1e310 in array', 't', '[1,0.1e310]', 'non_finite');

err('unsafe integer: 2^53+1', 't', '9007199254740993', 'unsafe_integer');
err('unsafe integer: -(2^53+1)', 't', '-9007199254740993', 'unsafe_integer');
err('unsafe integer: 12345678901234567890', 't', '[12345678901234567890]', 'unsafe_integer');
err('unsafe integer: nested 2^53+3', 't', '{"a":{"b":[9007199254740995]}}', 'unsafe_integer');
ok('integer beyond 2^53 that is already its double\'s canonical form: 2^53+2', 't', '9007199254740994', { canonical: '9007199254740994' });
ok('integer beyond 2^53 that is already its double\'s canonical form: 1e20 written out', 't', '100000000000000000000', { canonical: '100000000000000000000', same: '1e20' });
ok('integer beyond 2^53 that is already its double\'s canonical form: 1.2345678901234568e20', 't', '-123456789012345680000', { canonical: '-123456789012345680000', same: '-1.2345678901234568e20' });
err('unsafe integer: -2^64', 't', '{"n":-18446744073709551616}', 'unsafe_integer');
err('unsafe integer: 2^60 written exactly (its shortest digits are 1152921504606847)', 't', '1152921504606846976', 'unsafe_integer');
err('unsafe integer: exact value of the double 1e23 (its shortest digits are 1)', 't', '99999999999999991611392', 'unsafe_integer');
err('unsafe integer: 400 digits overflow a double', 't', '1' + '0'.repeat(400), 'unsafe_integer');
err('non-finite: 400 digits and a fraction overflow a double', 't', '1' + '0'.repeat(400) + '.0', 'non_finite');

// An integer beyond 2^53 in any form: the rule looks at the value, not the spelling.
// Accepted only when the significant digits (leading and trailing zeros dropped,
// decimal point ignored) are the shortest round-trip digits of the double.
err('unsafe integer: 2^53+1 with a fraction (.0)', 't', '9007199254740993.0', 'unsafe_integer');
err('unsafe integer: -(2^53+1) with a fraction (.000)', 't', '[-9007199254740993.000]', 'unsafe_integer');
err('unsafe integer: 2^53+1 with an exponent (e0)', 't', '9007199254740993e0', 'unsafe_integer');
err('unsafe integer: 2^53+1 in exponent form (9.007199254740993e15)', 't', '9.007199254740993e15', 'unsafe_integer');
err('unsafe integer: 2^53+1 with leading zeros (0.0009007199254740993e19)', 't', '0.0009007199254740993e19', 'unsafe_integer');
err('unsafe integer: 2^53+1 with a negative exponent (90071992547409930e-1)', 't', '{"n":90071992547409930e-1}', 'unsafe_integer');
err('unsafe integer: 2^53+3 as 9.007199254740995E+15', 't', '9.007199254740995E+15', 'unsafe_integer');
err('unsafe integer: 17 digits where 16 are shortest (9.9999999999999992e22 is 1e23)', 't', '9.9999999999999992e22', 'unsafe_integer');
err('unsafe integer: 1.7976931348623158e308 (an integer that rounds to the largest double, 1.7976931348623157e308)', 't', '1.7976931348623158e308', 'unsafe_integer');
ok('integer beyond 2^53 with shortest digits: 9007199254740992.0 is 2^53', 't', '9007199254740992.0', { canonical: '9007199254740992', same: '2^53' });
ok('integer beyond 2^53 with shortest digits: 9.007199254740992e15 is 2^53', 't', '9.007199254740992e15', { canonical: '9007199254740992', same: '2^53' });
ok('integer beyond 2^53 with shortest digits: 9007199254740994.0e0', 't', '9007199254740994.0e0', { canonical: '9007199254740994', same: '2^53+2' });
ok('integer beyond 2^53 with shortest digits: 9007199254740994000e-3', 't', '9007199254740994000e-3', { canonical: '9007199254740994', same: '2^53+2' });
ok('integer beyond 2^53 with shortest digits: 1.5e300', 't', '1.5e300', { canonical: '1.5e+300' });
ok('integer beyond 2^53 with shortest digits: 1152921504606847000 (2^60)', 't', '1152921504606847000', { canonical: '1152921504606847000', same: '2^60' });
ok('integer beyond 2^53 with shortest digits: 1.152921504606847e18 (2^60)', 't', '1.152921504606847e18', { canonical: '1152921504606847000', same: '2^60' });
ok('integer beyond 2^53 with shortest digits: 1e21 written as an integer', 't', '1000000000000000000000', { canonical: '1e+21', same: '1e21' });
ok('integer beyond 2^53 with shortest digits: -1e21 written as an integer', 't', '[-1000000000000000000000]', { canonical: '[-1e+21]' });
ok('integer beyond 2^53 with shortest digits: 123000000000000000000000', 't', '123000000000000000000000', { canonical: '1.23e+23', same: '1.23e23' });
ok('integer beyond 2^53 with shortest digits: 1.23e23', 't', '1.23e23', { canonical: '1.23e+23', same: '1.23e23' });
ok('integer beyond 2^53 with shortest digits: 1e23 (not exact, but its shortest spelling)', 't', '[1e23,100000000000000000000000]', { canonical: '[1e+23,1e+23]' });
ok('not an integer, so not subject to the 2^53 rule: 9007199254740993.5', 't', '9007199254740993.5', { canonical: '9007199254740994' });
ok('not an integer, so not subject to the 2^53 rule: 0.1, 1.25e-3, 12345678901234567.89', 't', '[0.1,1.25e-3,12345678901234567.89]',
  { canonical: '[0.1,0.00125,12345678901234568]' });

// --- strings -------------------------------------------------------------------
ok('short escapes', 't', j`"\b\t\n\f\r"`, { canonical: j`"\b\t\n\f\r"`, same: 'short' });
ok('short-form controls given as \\u escapes', 't', j`"\u0008\u0009\u000a\u000c\u000D"`, { canonical: j`"\b\t\n\f\r"`, same: 'short' });
ok('every control character', 't',
  '"' + Array.from({ length: 32 }, (_, c) => '\\u' + c.toString(16).padStart(4, '0').toUpperCase()).join('') + '"',
  { canonical: j`"\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f"` });
ok('escaped NUL stays escaped', 't', j`"a\u0000b"`, { canonical: j`"a\u0000b"` });
ok('escaped slash becomes raw', 't', j`"a\/b"`, { canonical: '"a/b"', same: 'slash' });
ok('raw slash', 't', '"a/b"', { canonical: '"a/b"', same: 'slash' });
ok('\\u0041 unescaped to A', 't', j`"\u0041\u0062c"`, { canonical: '"Abc"', same: 'Abc' });
ok('plain Abc', 't', '"Abc"', { canonical: '"Abc"', same: 'Abc' });
ok('quote and backslash', 't', j`"\"\\"`, { canonical: j`"\"\\"`, same: 'qb' });
ok('quote and backslash as \\u escapes', 't', j`"\u0022\u005C"`, { canonical: j`"\"\\"`, same: 'qb' });
ok('escaped DEL becomes raw', 't', j`"\u007f"`, { canonical: '"\x7f"', same: 'del' });
ok('raw DEL', 't', '"\x7f"', { canonical: '"\x7f"', same: 'del' });
ok('escaped U+2028 U+2029 become raw', 't', j`"\u2028\u2029"`, { canonical: '"\u2028\u2029"', same: 'ls' });
ok('raw U+2028 U+2029', 't', '"\u2028\u2029"', { canonical: '"\u2028\u2029"', same: 'ls' });
ok('escaped non-BMP becomes raw', 't', j`"\ud83d\ude00"`, { canonical: '"\u{1F600}"', same: 'emoji' });
ok('escaped non-BMP uppercase hex', 't', j`"\uD83D\uDE00"`, { canonical: '"\u{1F600}"', same: 'emoji' });
ok('raw non-BMP', 't', '"\u{1F600}"', { canonical: '"\u{1F600}"', same: 'emoji' });
ok('escaped BMP non-ASCII becomes raw', 't', j`"\u00e9\u20AC\ufffd"`, { canonical: '"\u00e9\u20ac\ufffd"', same: 'bmp' });
ok('raw BMP non-ASCII', 't', '"\u00e9\u20ac\ufffd"', { canonical: '"\u00e9\u20ac\ufffd"', same: 'bmp' });
ok('first and last supplementary code points (non-noncharacter)', 't', j`["\ud800\udc00","\udbff\udffd"]`,
  { canonical: '["\u{10000}","\u{10FFFD}"]' });
ok('escapes in member names', 't', j`{"a\/":2,"\n\u0001":1}`, { canonical: j`{"\n\u0001":1,"a/":2}` });
ok('empty name and empty value', 't', '{"":""}', { canonical: '{"":""}' });

err('lone surrogate: high', 't', j`"\ud800"`, 'lone_surrogate');
err('lone surrogate: low', 't', j`"\udc00"`, 'lone_surrogate');
err('lone surrogate: high followed by \\u0041', 't', j`"\ud800\u0041"`, 'lone_surrogate');
err('lone surrogate: high followed by high', 't', j`"\ud800\ud800"`, 'lone_surrogate');
err('lone surrogate: reversed pair', 't', j`"\ude00\ud83d"`, 'lone_surrogate');
err('lone surrogate: high followed by raw non-BMP character', 't', j`"\ud83d` + '\u{1F600}"', 'lone_surrogate');
err('lone surrogate: high followed by \\n escape', 't', j`"\uDBFF\n"`, 'lone_surrogate');
err('lone surrogate: in member name', 't', j`{"\ud83d":1}`, 'lone_surrogate');
err('lone surrogate: nested', 't', j`[[{"a":"x\udfff"}]]`, 'lone_surrogate');

// --- noncharacters (RFC 7493 section 2.1): U+FDD0..U+FDEF and U+xFFFE, U+xFFFF ------
{
  const esc = (cp) => {
    const s = String.fromCodePoint(cp);
    return [...Array(s.length).keys()].map((k) => '\\u' + s.charCodeAt(k).toString(16).padStart(4, '0')).join('');
  };
  const hex = (cp) => 'U+' + cp.toString(16).toUpperCase().padStart(4, '0');
  let n = 0;
  for (let cp = 0; cp <= 0x10ffff; cp++) if (isNoncharacter(cp)) n++;
  if (n !== 66) throw new Error(`isNoncharacter matches ${n} code points, want 66`);
  for (const cp of [0xfdd0, 0xfdef, 0xfffe, 0xffff, 0x1fffe, 0x10ffff]) {
    err(`noncharacter: ${hex(cp)} raw in a value`, 't', `{"a":"x${String.fromCodePoint(cp)}y"}`, 'noncharacter');
    err(`noncharacter: ${hex(cp)} escaped in a value`, 't', `{"a":"x${esc(cp)}y"}`, 'noncharacter');
  }
  err('noncharacter: U+FFFF raw in a member name', 't', '{"a\uffff":1}', 'noncharacter');
  err('noncharacter: U+FDD0 escaped in a member name (upper-case hex)', 't', j`{"\uFDD0":1}`, 'noncharacter');
  err('noncharacter: U+2FFFE raw in a member name', 't', '{"\u{2FFFE}":1}', 'noncharacter');
  err('noncharacter: U+10FFFE escaped in a member name', 't', j`{"\uDBFF\uDFFE":1}`, 'noncharacter');
  err('noncharacter: U+FFFE in an unselected member', 't', j`{"tenant_id":1,"x":"\ufffe"}`, 'noncharacter', { key_fields: ['tenant_id'] });
  err('noncharacter: U+8FFFF nested', 't', '[[{"a":["ok","\u{8FFFF}"]}]]', 'noncharacter');
  const neighbours = [0xfdcf, 0xfdf0, 0xfffd, 0xfeff, 0x1fffd, 0x10fffd];
  const raw = '"' + neighbours.map((cp) => String.fromCodePoint(cp)).join('') + '"';
  ok('noncharacter neighbours are accepted: U+FDCF U+FDF0 U+FFFD U+FEFF U+1FFFD U+10FFFD raw', 't', raw, { canonical: raw, same: 'nonchar-neighbours' });
  ok('noncharacter neighbours are accepted: U+FDCF U+FDF0 U+FFFD U+FEFF U+1FFFD U+10FFFD escaped', 't',
    '"' + neighbours.map(esc).join('') + '"', { canonical: raw, same: 'nonchar-neighbours' });
  ok('noncharacter neighbours are accepted in member names', 't', j`{"\ufdcf":1,"\ufdf0":2,"` + '\u{1FFFD}' + '":3}',
    { canonical: '{"\u{1FFFD}":3,"\ufdcf":1,"\ufdf0":2}' }); // UTF-16 order: the surrogate pair first
}

err('invalid utf8: 0xFF in string', 't', bytes('{"a":"', [0xff], '"}'), 'invalid_utf8');
err('invalid utf8: Latin-1 e-acute', 't', bytes('"caf', [0xe9], '"'), 'invalid_utf8');
err('invalid utf8: overlong slash', 't', bytes('"', [0xc0, 0xaf], '"'), 'invalid_utf8');
err('invalid utf8: truncated sequence', 't', bytes('"', [0xe2, 0x82], '"'), 'invalid_utf8');
err('invalid utf8: UTF-8 encoded surrogate', 't', bytes('"', [0xed, 0xa0, 0x80], '"'), 'invalid_utf8');
err('invalid utf8: above U+10FFFF', 't', bytes('"', [0xf4, 0x90, 0x80, 0x80], '"'), 'invalid_utf8');
err('invalid utf8: stray continuation byte in member name', 't', bytes('{"', [0x80], '":1}'), 'invalid_utf8');
err('invalid utf8: nested', 't', bytes('[{"a":["ok","', [0xfe], '"]}]'), 'invalid_utf8');

// --- member order (UTF-16 code units) ---------------------------------------------
ok('RFC 8785 3.2.3 sorting example', 't',
  j`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
  { canonical: '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign","\u{1F600}":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}' });
ok('non-BMP name sorts before U+E000 (escaped input)', 't', j`{"\ue000":1,"\ud83d\ude00":2}`,
  { canonical: '{"\u{1F600}":2,"\ue000":1}', same: 'astral' });
ok('non-BMP name sorts before U+E000 (raw input)', 't', '{"\ue000":1,"\u{1F600}":2}',
  { canonical: '{"\u{1F600}":2,"\ue000":1}', same: 'astral' });
ok('U+10000 sorts before U+F8FF', 't', j`{"\uf8ff":1,"\ud800\udc00":2}`, { canonical: '{"\u{10000}":2,"\uf8ff":1}' });
ok('supplementary private use sorts before BMP private use', 't', '{"\uf8ff":3,"\ue000":2,"\u{10FFFD}":1}',
  { canonical: '{"\u{10FFFD}":1,"\ue000":2,"\uf8ff":3}' });
ok('U+FFFD sorts after non-BMP', 't', '{"\ufffd":1,"\u{1F600}":2,"\uffef":3}', { canonical: '{"\u{1F600}":2,"\uffef":3,"\ufffd":1}' });
ok('non-BMP vs private use names at nested depth', 't', j`{"x":[{"\ue000":1,"\ud83d\ude00":2,"a":{"\uf8ff":0,"\ud800\udc00":0}}]}`,
  { canonical: '{"x":[{"a":{"\u{10000}":0,"\uf8ff":0},"\u{1F600}":2,"\ue000":1}]}' });
ok('case, prefix and digit order', 't', '{"b":1,"B":2,"ab":3,"a":4,"":5,"10":6,"9":7}',
  { canonical: '{"":5,"10":6,"9":7,"B":2,"a":4,"ab":3,"b":1}' });
ok('names compared after unescaping', 't', j`{"\u0062":1,"a":2}`, { canonical: '{"a":2,"b":1}' });
ok('names differing in Unicode normalisation are distinct', 't', j`{"\u00e9":1,"e\u0301":2}`,
  { canonical: '{"e\u0301":2,"\u00e9":1}' });

err('duplicate name: top level', 't', '{"a":1,"a":2}', 'duplicate_name');
err('duplicate name: same value', 't', '{"a":1,"b":2,"a":1}', 'duplicate_name');
err('duplicate name: escaped \\u0061 equals a', 't', j`{"a":1,"\u0061":2}`, 'duplicate_name');
err('duplicate name: escaped and raw non-BMP', 't', j`{"` + '\u{1F600}' + j`":1,"\ud83d\ude00":2}`, 'duplicate_name');
err('duplicate name: inside array inside object', 't', '{"x":[1,{"k":1,"j":2,"k":3}]}', 'duplicate_name');
err('duplicate name: deep', 't', '[[[{"a":{"b":{"c":0,"c":0}}}]]]', 'duplicate_name');

// --- equivalence pairs ---------------------------------------------------------------
ok('equivalence pair A (1 of 2): {"b":1,"a":2.0}', 't', '{"b":1,"a":2.0}', { canonical: '{"a":2,"b":1}', same: 'pairA' });
ok('equivalence pair A (2 of 2): {"a":2,"b":1e0}', 't', '{"a":2,"b":1e0}', { canonical: '{"a":2,"b":1}', same: 'pairA' });
ok('equivalence pair B (1 of 2): escaped, spaced, unordered', 't', j`{ "s" : "\u00e9\/" , "n" : [ 1.50E1 , -0 ] }`,
  { canonical: '{"n":[15,0],"s":"\u00e9/"}', same: 'pairB' });
ok('equivalence pair B (2 of 2): canonical form', 't', '{"n":[15,0],"s":"\u00e9/"}', { canonical: '{"n":[15,0],"s":"\u00e9/"}', same: 'pairB' });

// --- key_fields ----------------------------------------------------------------------
const job = '{"tenant_id":42,"period":"2024-Q1","requested_at":"2024-04-01T10:00:00Z","force":true}';
ok('key fields select tenant (same fingerprint as simple object)', 'recompute_financials', job,
  { key_fields: ['tenant_id'], canonical: '{"tenant_id":42}', same: 'tenant' });
ok('key fields listed twice count once (same fingerprint as simple object)', 'recompute_financials', job,
  { key_fields: ['tenant_id', 'tenant_id'], canonical: '{"tenant_id":42}', same: 'tenant' });
ok('key fields: several', 't', job, { key_fields: ['tenant_id', 'period'], canonical: '{"period":"2024-Q1","tenant_id":42}', same: 'kf2' });
ok('key fields: order of key_fields irrelevant', 't', job, { key_fields: ['period', 'tenant_id'], canonical: '{"period":"2024-Q1","tenant_id":42}', same: 'kf2' });
ok('key fields: duplicate listing among several', 't', job, { key_fields: ['period', 'tenant_id', 'period'], canonical: '{"period":"2024-Q1","tenant_id":42}', same: 'kf2' });
ok('key fields: nested value kept whole and canonicalised', 't',
  '{"noise":1,"scope":{"b":[1,{"d":2.0,"c":1}],"a":null}}',
  { key_fields: ['scope'], canonical: '{"scope":{"a":null,"b":[1,{"c":1,"d":2}]}}' });
ok('key fields: null value is present', 't', '{"a":null,"b":1}', { key_fields: ['a'], canonical: '{"a":null}' });
ok('key fields: all fields (same fingerprint as without key fields)', 't', '{"b":[true],"a":"x"}',
  { key_fields: ['a', 'b'], canonical: '{"a":"x","b":[true]}', same: 'kfall' });
ok('key fields: none given (same fingerprint as all fields)', 't', '{"b":[true],"a":"x"}', { canonical: '{"a":"x","b":[true]}', same: 'kfall' });
ok('key fields: empty list means all args (same fingerprint as all fields)', 't', '{"b":[true],"a":"x"}',
  { key_fields: [], canonical: '{"a":"x","b":[true]}', same: 'kfall' });
ok('key fields: empty list with non-object args', 't', '[1,2]', { key_fields: [], canonical: '[1,2]' });
ok('key fields: matched against unescaped names', 't', j`{"\u0074enant_id":7,"x":1}`, { key_fields: ['tenant_id'], canonical: '{"tenant_id":7}' });
ok('key fields: non-BMP and private-use names, UTF-16 order', 't', '{"\u{1F600}":1,"\ue000":2,"z":3}',
  { key_fields: ['\ue000', '\u{1F600}'], canonical: '{"\u{1F600}":1,"\ue000":2}' });

err('missing key field: absent', 't', '{"other":1}', 'missing_key_field', { key_fields: ['tenant_id'] });
err('missing key field: one of several', 't', '{"a":1}', 'missing_key_field', { key_fields: ['a', 'b'] });
err('missing key field: only present at nested depth', 't', '{"a":{"b":1}}', 'missing_key_field', { key_fields: ['b'] });
err('missing key field: names are case-sensitive', 't', '{"Tenant_id":1}', 'missing_key_field', { key_fields: ['tenant_id'] });
err('missing key field: empty object', 't', '{}', 'missing_key_field', { key_fields: ['a'] });

err('key fields not object: array', 't', '[1,2]', 'key_fields_not_object', { key_fields: ['a'] });
err('key fields not object: array of objects', 't', '[{"a":1}]', 'key_fields_not_object', { key_fields: ['a'] });
err('key fields not object: string', 't', '"a"', 'key_fields_not_object', { key_fields: ['a'] });
err('key fields not object: null', 't', 'null', 'key_fields_not_object', { key_fields: ['a'] });
err('key fields not object: number', 't', '42', 'key_fields_not_object', { key_fields: ['a'] });

err('duplicate name in unselected member still rejected', 't', '{"tenant_id":1,"x":{"k":1,"k":2}}', 'duplicate_name', { key_fields: ['tenant_id'] });
err('unsafe integer in unselected member still rejected', 't', '{"tenant_id":1,"x":9007199254740993}', 'unsafe_integer', { key_fields: ['tenant_id'] });

// --- invalid JSON ------------------------------------------------------------------
const invalidJson = [
  ['empty input', ''],
  ['whitespace only', ' \n'],
  ['truncated object', '{"a":1'],
  ['truncated array', '[1,2'],
  ['unterminated string', '"abc'],
  ['trailing garbage', '{"a":1}x'],
  ['two top-level values', '{} {}'],
  ['single-quoted name', "{'a':1}"],
  ['single-quoted string', "['a']"],
  ['trailing comma in object', '{"a":1,}'],
  ['trailing comma in array', '[1,]'],
  ['leading zero', '01'],
  ['leading zero nested', '{"a":[007]}'],
  ['negative leading zero', '-01'],
  ['NaN literal', 'NaN'],
  ['NaN in array', '[NaN]'],
  ['Infinity literal', 'Infinity'],
  ['-Infinity literal', '{"a":-Infinity}'],
  ['leading plus', '+1'],
  ['leading dot', '.5'],
  ['trailing dot', '1.'],
  ['empty exponent', '1e'],
  ['exponent sign only', '1e+'],
  ['minus only', '-'],
  ['hex number', '0x1F'],
  ['block comment', '{"a":1 /* c */}'],
  ['line comment', '// c\n{}'],
  ['unquoted name', '{a:1}'],
  ['number as name', '{1:2}'],
  ['raw tab in string', '"a\tb"'],
  ['raw newline in string', '"a\nb"'],
  ['raw NUL in string', '"a\u0000b"'],
  ['invalid escape \\x', j`"\x41"`],
  ['invalid escape \\a', j`"\a"`],
  ['invalid escape \\U', j`"\U0041"`],
  ['short \\u escape', j`"\u12"`],
  ['non-hex \\u escape', j`"\u12G4"`],
  ['capitalised literal', 'True'],
  ['upper-case null', 'NULL'],
  ['truncated literal', '[nul]'],
  ['missing comma', '[1 2]'],
  ['missing colon', '{"a" 1}'],
  ['missing value', '{"a":}'],
  ['mismatched brackets', '[1}'],
  ['extra closing bracket', '[]]'],
  ['form feed is not whitespace', '\f{}'],
  ['no-break space is not whitespace', '\u00a0{}'],
  ['byte order mark', '\ufeff{}'],
  ['byte order mark before an array', '\ufeff[1]'],
  ['byte order mark before a string', '\ufeff"a"'],
  ['byte order mark after whitespace', ' \ufeff{}'],
];
for (const [name, text] of invalidJson) err(`invalid json: ${name}`, 't', text, 'invalid_json');

// ---------------------------------------------------------------------------------
// Self-checks, then compute and write.
// ---------------------------------------------------------------------------------

const failures = [];
const check = (cond, msg) => { if (!cond) failures.push(msg); };

// JSON.stringify(string) must equal RFC 8785 string serialisation (section 3.2.2.2).
function jcsStringByHand(s) {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (c < 0x20) {
      const short = { 8: '\\b', 9: '\\t', 10: '\\n', 12: '\\f', 13: '\\r' }[c];
      out += short ?? '\\u' + c.toString(16).padStart(4, '0');
    } else out += ch;
  }
  return out + '"';
}
for (let c = 0; c <= 0xffff; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const s = String.fromCharCode(c);
  check(JSON.stringify(s) === jcsStringByHand(s), `JSON.stringify differs from JCS for U+${c.toString(16)}`);
}
for (const cp of [0x10000, 0x1f600, 0x10fffd]) {
  const s = String.fromCodePoint(cp);
  check(JSON.stringify(s) === jcsStringByHand(s), `JSON.stringify differs from JCS for U+${cp.toString(16)}`);
}
check(jcs(new Map([['a', -0]])) === '{"a":0}', 'jcs(-0)');

const names = new Set();
const vectors = [];
const groups = { same: new Map(), distinct: new Map() };
const kindCounts = Object.fromEntries(ERROR_KINDS.map((k) => [k, 0]));

for (const c of cases) {
  check(!names.has(c.name), `duplicate vector name: ${c.name}`);
  names.add(c.name);

  const input = typeof c.args === 'string' ? Buffer.from(c.args, 'utf8') : c.args;
  if (typeof c.args === 'string') check(c.args.isWellFormed(), `${c.name}: args text is not well-formed UTF-16`);
  let isUtf8 = true;
  try { new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(input); } catch { isUtf8 = false; }

  const v = { name: c.name, type: c.type };
  if (isUtf8) v.args_text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(input);
  else v.args_base64 = input.toString('base64');
  if (c.key_fields !== undefined) v.key_fields = c.key_fields;

  let result, thrown;
  try { result = fp1(c.type, input, c.key_fields); } catch (e) { thrown = e; }

  if (c.error !== undefined) {
    check(ERROR_KINDS.includes(c.error), `${c.name}: unknown kind ${c.error}`);
    if (!thrown) check(false, `${c.name}: expected ${c.error}, got canonical ${result.canonical}`);
    else if (thrown.kind !== c.error) check(false, `${c.name}: expected ${c.error}, got ${thrown.kind ?? thrown} (${thrown.message})`);
    kindCounts[c.error]++;
    v.error = c.error;
  } else {
    if (thrown) { check(false, `${c.name}: unexpected error ${thrown.kind ?? ''} ${thrown.message}`); continue; }
    if (c.canonical !== undefined) check(result.canonical === c.canonical, `${c.name}: canonical ${result.canonical} != expected ${c.canonical}`);
    v.canonical = result.canonical;
    v.fingerprint = result.fingerprint;
    for (const g of ['same', 'distinct']) {
      if (c[g] === undefined) continue;
      if (!groups[g].has(c[g])) groups[g].set(c[g], []);
      groups[g].get(c[g]).push(v);
    }
  }
  vectors.push(v);
}

for (const [g, vs] of groups.same) {
  check(vs.length >= 2, `same-group ${g} has fewer than 2 members`);
  check(new Set(vs.map((v) => v.fingerprint)).size === 1, `same-group ${g}: fingerprints differ`);
}
for (const [g, vs] of groups.distinct) {
  check(vs.length >= 2, `distinct-group ${g} has fewer than 2 members`);
  check(new Set(vs.map((v) => v.fingerprint)).size === vs.length, `distinct-group ${g}: fingerprints collide`);
}
for (const [k, n] of Object.entries(kindCounts)) check(n >= 2, `error kind ${k} covered ${n} times (< 2)`);

if (failures.length) {
  console.error(failures.join('\n'));
  console.error(`${failures.length} assertion(s) failed; vector file NOT written`);
  process.exit(1);
}

const file = {
  spec: 'fp1',
  version: 2,
  description:
    'fp1(type, args) = lowercase hex(SHA-256("fp1" LF type LF JCS(args))). args_text is the exact UTF-8 input; args_base64 is used instead when the input is not valid UTF-8. For valid cases, canonical is JCS(args after key_fields selection) and fingerprint the expected hex. For invalid cases, error is the kind. ' +
    'Version 2 (no input accepted by both versions changes its canonical form or fingerprint): a number whose value is an integer beyond 2^53 in magnitude, in any form (9007199254740993.0, 9.007199254740993e15 as well as 9007199254740993), is refused with unsafe_integer unless its significant digits (leading and trailing zeros dropped, decimal point ignored) are exactly the shortest round-trip digits of the double it denotes; so 9007199254740993.0, 9007199254740993e0 and 1.7976931348623158e308, accepted by version 1, are now refused, and 1000000000000000000000, refused by version 1, is now accepted (canonical 1e+21). Numbers whose value is not an integer are unaffected. Noncharacters (U+FDD0-U+FDEF, U+xFFFE, U+xFFFF), raw or escaped, are refused with noncharacter. Nesting deeper than 1000 arrays and objects is refused with too_deep (the outermost is level 1). A leading byte order mark is invalid_json. error_kinds gains noncharacter and too_deep.',
  error_kinds: ERROR_KINDS,
  vectors,
};
const outPath = new URL('../fp1-vectors.json', import.meta.url);
writeFileSync(outPath, JSON.stringify(file, null, 2) + '\n');
console.log(`wrote ${vectors.length} vectors to ${outPath.pathname}`);
console.log(`valid: ${vectors.filter((v) => v.error === undefined).length}; errors: ${JSON.stringify(kindCounts)}`);
