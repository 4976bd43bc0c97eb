package debounce

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/coalesce-io/coalesce/fingerprint"
)

// RoundKey identifies the rounds of one effect: the fp1 fingerprint of the
// event's args (or key fields), or, when the event names a key explicitly, a
// SHA-256 of the job type and that key. Its text form is 64 hex digits.
type RoundKey [sha256.Size]byte

// String returns the key as 64 lowercase hex digits.
func (k RoundKey) String() string { return hex.EncodeToString(k[:]) }

// MarshalText implements encoding.TextMarshaler.
func (k RoundKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *RoundKey) UnmarshalText(b []byte) error {
	p, err := ParseRoundKey(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// ParseRoundKey reads a round key from its 64 hex digits.
func ParseRoundKey(s string) (RoundKey, error) {
	f, err := fingerprint.Parse(s)
	if err != nil {
		return RoundKey{}, fmt.Errorf("%w: round key: %v", ErrInvalidEvent, err)
	}
	return RoundKey(f), nil
}

// ExplicitKey returns the round key of an event that names its key itself.
func ExplicitKey(jobType, key string) RoundKey {
	h := sha256.New()
	h.Write([]byte("fp1key\n"))
	h.Write([]byte(jobType))
	h.Write([]byte{'\n'})
	h.Write([]byte(key))
	var k RoundKey
	h.Sum(k[:0])
	return k
}

// MaxExplicitKeyLen bounds an event's explicit key, in bytes.
const MaxExplicitKeyLen = 1024

// DefaultPrefix is the Redis key prefix of reservations.
const DefaultPrefix = "c"

// digestLen is how many bytes of the round key name its Redis key: 88 bits
// keep collisions out of reach (1e8 live rounds: ~1e-11) while the whole key
// stays within 14 bytes with the default prefix, the size at which Redis
// allocates the least per key (117 B per pending round measured, with an
// integer value, against 133 B at 15-22 bytes).
const digestLen = 11

// typeMix is mixed into a round key's digest so the Redis key depends on the
// job type too: a round key is only ever computed for its own type, but an
// admin call naming (another type, that key) must not reach the round.
type typeMix [digestLen]byte

func mixFor(jobType string) typeMix {
	h := sha256.Sum256([]byte("coalesce type\n" + jobType))
	var m typeMix
	copy(m[:], h[:])
	return m
}

// redisKey returns the reservation key: prefix "{" digest "}". The braces make
// the digest the Cluster hash tag, so a round's other keys (suffixes after
// the brace) share its slot. A '}' in the digest would end the tag early, so
// it is replaced.
func redisKey(prefix string, mix typeMix, k RoundKey, suffix string) string {
	var b strings.Builder
	b.Grow(len(prefix) + digestLen + 2 + len(suffix))
	b.WriteString(prefix)
	b.WriteByte('{')
	for i, c := range k[:digestLen] {
		c ^= mix[i]
		if c == '}' {
			c = '|'
		}
		b.WriteByte(c)
	}
	b.WriteByte('}')
	b.WriteString(suffix)
	return b.String()
}

// validatePrefix: the prefix must not hold braces (they would change the hash
// tag) or glob characters (SCAN patterns are built from it).
func validatePrefix(p string) error {
	if strings.ContainsAny(p, "{}*?[]\\") {
		return fmt.Errorf("%w: prefix %q must not contain { } * ? [ ] or \\", ErrInvalidPolicy, p)
	}
	if len(p) > 64 {
		return fmt.Errorf("%w: prefix %q is longer than 64 bytes", ErrInvalidPolicy, p)
	}
	return nil
}

// identityKey is where a packed round's identity is kept once an event found
// the round overdue (identity.go): the round's key and "j", same hash tag.
func identityKey(roundKey string) string { return roundKey + "j" }
