package fingerprint_test

import (
	"errors"
	"fmt"

	"github.com/coalesce-io/coalesce/fingerprint"
)

func ExampleFromJSON() {
	// Member order, number spelling and whitespace do not change the fingerprint.
	a, _ := fingerprint.FromJSON("recompute_financials", []byte(`{"tenant_id":42,"period":"2026-08"}`))
	b, _ := fingerprint.FromJSON("recompute_financials", []byte(`{ "period": "2026-08", "tenant_id": 42.0 }`))
	fmt.Println(a == b)
	fmt.Println(a)
	// Output:
	// true
	// d03288dfed496c312b3abc43df61d08e28c38c2d9260552f35b3947fb4d48c81
}

func ExampleNewScheme_keyFields() {
	// Key the effect, not the message: one recomputation per tenant.
	s, _ := fingerprint.NewScheme("recompute_financials", "tenant_id")
	a, _ := s.FromJSON([]byte(`{"tenant_id":42,"order_id":1001}`))
	b, _ := s.FromJSON([]byte(`{"tenant_id":42,"order_id":1002}`))
	fmt.Println(a == b)
	// Output: true
}

func ExampleFromJSON_unsafeInteger() {
	// 2^53+1 cannot be held by a double: it would read as 2^53 and collide.
	_, err := fingerprint.FromJSON("notify", []byte(`{"user":{"id":9007199254740993}}`))
	fmt.Println(errors.Is(err, fingerprint.ErrUnsafeInteger))
	fmt.Println(err)
	// The rule is about the value, whatever the spelling.
	_, err = fingerprint.FromJSON("notify", []byte(`{"user":{"id":9.007199254740993e15}}`))
	fmt.Println(err)
	// Spelled with the shortest digits of its double, a large integer passes.
	canon, _ := fingerprint.Canonicalize([]byte(`[9007199254740994,1000000000000000000000]`))
	fmt.Println(string(canon))
	// Output:
	// true
	// args.user.id: integer 9007199254740993 exceeds 2^53 and would lose precision (it reads as 9007199254740992); send it as a string, or as 9007199254740992 if that value is meant
	// args.user.id: number 9.007199254740993e15 denotes an integer beyond 2^53 and would lose precision (it reads as 9007199254740992); send it as a string, or as 9007199254740992 if that value is meant
	// [9007199254740994,1e+21]
}

func ExampleCanonicalize() {
	canon, _ := fingerprint.Canonicalize([]byte(`{"b":[1.0,1e21],"a":"\u00e9\/"}`))
	fmt.Println(string(canon))
	// Output: {"a":"é/","b":[1,1e+21]}
}
