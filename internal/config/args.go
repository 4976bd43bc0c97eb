package config

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// argsJSON writes the YAML value n as JSON. Mapping keys must be strings,
// and values without a JSON form (binary, .inf, .nan, custom tags) are
// refused. Numbers already written as JSON numbers are copied digit for
// digit; other forms (0x1F, 1_000, 1e3 without a dot) are converted.
func (d *decoder) argsJSON(b *bytes.Buffer, n *yaml.Node, path string) error {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		entries, err := d.mapping(n, path)
		if err != nil {
			return err
		}
		b.WriteByte('{')
		for i, e := range entries {
			if t := e.keyNode.ShortTag(); t != tagStr {
				return d.nodeErr(e.keyNode, e.path, "key %s is %s, but JSON object keys are strings; quote it", quote(e.keyNode.Value), describe(e.keyNode))
			}
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, e.key)
			b.WriteByte(':')
			if err := d.argsJSON(b, e.val, e.path); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := d.argsJSON(b, item, index(path, i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case yaml.ScalarNode:
	default:
		return d.nodeErr(n, path, "has no JSON form")
	}
	switch tag := n.ShortTag(); tag {
	case tagNull:
		b.WriteString("null")
	case tagBool:
		var v bool
		if err := n.Decode(&v); err != nil {
			return d.nodeErr(n, path, "%s is not true or false", quote(n.Value))
		}
		b.WriteString(strconv.FormatBool(v))
	case tagStr, tagTimestamp: // a date stays the text it was written as
		writeJSONString(b, n.Value)
	case tagInt, tagFloat:
		if json.Valid([]byte(n.Value)) {
			b.WriteString(n.Value)
			return nil
		}
		var f float64
		if tag == tagInt {
			var i int64
			if err := n.Decode(&i); err == nil {
				b.WriteString(strconv.FormatInt(i, 10))
				return nil
			}
		}
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return d.nodeErr(n, path, "%s has no JSON form; quote it to pass a string", quote(n.Value))
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case tagBinary:
		return d.nodeErr(n, path, "binary values have no JSON form; pass the base64 text as a string (quote it without !!binary)")
	default:
		return d.nodeErr(n, path, "values tagged %s have no JSON form", tag)
	}
	return nil
}

// writeJSONString writes s as a JSON string, leaving < > & as they are.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}
