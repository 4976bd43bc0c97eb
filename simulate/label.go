package simulate

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/coalesce-io/coalesce/debounce"
)

// maxLabel bounds a key's label.
const maxLabel = 80

// keyLabel names a key for people: the event's explicit key, else the
// values of the policy's key fields (tenant_id=42), else its args.
func keyLabel(p debounce.Policy, ev debounce.Event) string {
	if ev.Key != "" {
		return truncate(ev.Key, maxLabel)
	}
	if len(p.KeyFields) > 0 {
		var m map[string]json.RawMessage
		if json.Unmarshal(ev.Args, &m) == nil {
			var b strings.Builder
			for i, f := range p.KeyFields {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(f)
				b.WriteByte('=')
				b.WriteString(plainValue(m[f]))
			}
			return truncate(b.String(), maxLabel)
		}
	}
	return truncate(compact(ev.Args), maxLabel)
}

// plainValue is a JSON value as a label shows it: a simple string without
// its quotes.
func plainValue(v json.RawMessage) string {
	var s string
	if len(v) > 1 && v[0] == '"' && json.Unmarshal(v, &s) == nil && s != "" && !strings.ContainsAny(s, " =\"") {
		return s
	}
	return compact(v)
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}
