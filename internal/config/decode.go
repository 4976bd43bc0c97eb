package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/coalesce-io/coalesce/debounce"
)

// YAML tags the decoder looks at.
const (
	tagNull      = "!!null"
	tagBool      = "!!bool"
	tagInt       = "!!int"
	tagFloat     = "!!float"
	tagStr       = "!!str"
	tagTimestamp = "!!timestamp"
	tagBinary    = "!!binary"
	tagMerge     = "!!merge"
)

// decoder walks the YAML node tree into a Config, remembering where each key
// was so that checks made later can point at it.
type decoder struct {
	file    string
	lines   map[string]int    // key path -> line of the key
	parents map[string]string // key path -> enclosing key path
	env     map[string]string // key path -> environment variable that set it

	addrsPath string // key that set Redis.Addrs: redis.addrs or redis.sentinel.addrs
	urlsPath  string // key that set NATS.URLs: nats.url or nats.urls
}

func newDecoder(file string) *decoder {
	return &decoder{
		file:      file,
		lines:     map[string]int{},
		parents:   map[string]string{},
		env:       map[string]string{},
		addrsPath: "redis.addrs",
		urlsPath:  "nats.urls",
	}
}

// nodeErr is a problem with the value at node n.
func (d *decoder) nodeErr(n *yaml.Node, path, format string, args ...any) *Error {
	return &Error{File: d.file, Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// pathErr is a problem with the value at path, found after decoding: it
// points at the variable that set it, or the line of the key (or of the
// nearest enclosing key when the key is absent).
func (d *decoder) pathErr(path string, cause error, format string, args ...any) *Error {
	e := &Error{Path: path, Msg: fmt.Sprintf(format, args...), Err: cause}
	for p := path; p != ""; p = d.parent(p) {
		if v, ok := d.env[p]; ok {
			e.Env = v
			return e
		}
	}
	e.File = d.file
	for p := path; p != ""; p = d.parent(p) {
		if line, ok := d.lines[p]; ok {
			e.Line = line
			break
		}
	}
	return e
}

// parent returns the path enclosing p: as recorded, or for the fixed key
// paths validation uses (no quoted segments), p without its last segment.
func (d *decoder) parent(p string) string {
	if q, ok := d.parents[p]; ok {
		return q
	}
	if strings.Contains(p, `"`) {
		return ""
	}
	if i := strings.LastIndexAny(p, ".["); i >= 0 {
		return p[:i]
	}
	return ""
}

// child returns the path of key under parent and remembers the parent, so
// that pathErr finds a line for keys the file leaves out.
func (d *decoder) child(parent, key string) string {
	p := join(parent, key)
	if _, ok := d.parents[p]; !ok {
		d.parents[p] = parent
	}
	return p
}

// syntaxErr turns a yaml.v3 parse error ("yaml: line 3: did not find
// expected key") into an *Error with its line.
func (d *decoder) syntaxErr(err error, data []byte) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: d.file, Err: err}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil {
				e.Line, msg = line, text
			}
		}
	}
	if parserProblem(msg) {
		// yaml.v3 prints the parser's 0-based line (scanner errors get +1,
		// parser errors do not: go-yaml/yaml#205), and none for line 0.
		e.Line++
	}
	e.Msg = "invalid YAML: " + msg
	if msg == "did not find expected key" || msg == "did not find expected '-' indicator" {
		// yaml.v3 names the line of the enclosing mapping (or list), not
		// the line whose indentation ends it too early.
		if line, indent := misindented(data); line > e.Line {
			e.Line = line
			e.Msg += fmt.Sprintf(" (this line is indented %d spaces, as no key or item above it is)", indent)
		}
	}
	return e
}

// misindented returns the first line (1-based) that is indented less than
// the line before it but not as much as any line it could belong with (a
// key or item of an enclosing block), and its indentation; 0 when none.
func misindented(data []byte) (line, indent int) {
	var levels []int // indentations of the enclosing blocks, innermost last
	for i, text := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimLeft(text, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		n := len(text) - len(trimmed)
		for len(levels) > 0 && levels[len(levels)-1] > n {
			levels = levels[:len(levels)-1]
			if len(levels) == 0 || levels[len(levels)-1] < n {
				return i + 1, n
			}
		}
		if len(levels) == 0 || levels[len(levels)-1] < n {
			levels = append(levels, n)
		}
	}
	return 0, 0
}

// parserProblem reports whether msg is one of yaml.v3's parser (not
// scanner) errors, whose line numbers are 0-based.
func parserProblem(msg string) bool {
	switch msg {
	case "did not find expected ',' or ']'",
		"did not find expected ',' or '}'",
		"did not find expected '-' indicator",
		"did not find expected <document start>",
		"did not find expected <stream-start>",
		"did not find expected key",
		"did not find expected node content",
		"found duplicate %TAG directive",
		"found duplicate %YAML directive",
		"found incompatible YAML document",
		"found undefined tag handle":
		return true
	}
	return false
}

// document decodes the YAML in data into c.
func (d *decoder) document(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return d.syntaxErr(err, data)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return d.syntaxErr(err, data)
	case len(extra.Content) > 0 && !isNull(extra.Content[0]):
		return d.nodeErr(&extra, "", "a second YAML document (after ---); keep the whole configuration in one")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if err := d.checkAliases(root); err != nil {
		return err
	}
	if r := deref(root); !isNull(r) && r.Kind != yaml.MappingNode {
		return d.nodeErr(r, "", "the file must be a mapping of keys (%s) to values, not %s", keyList(d.tagged(new(Config))), describe(r))
	}
	return d.fields(root, "", d.tagged(c))
}

// checkAliases refuses alias cycles and documents whose aliases would add
// more than maxAliasNodes nodes, before anything walks the tree.
func (d *decoder) checkAliases(root *yaml.Node) error {
	const (
		visiting = 1
		done     = 2
	)
	state := map[*yaml.Node]uint8{}
	size := map[*yaml.Node]int{} // expanded size of finished anchored nodes
	real := 0
	const limit = MaxFileSize + maxAliasNodes // well past any real document, far from overflow
	var visit func(n *yaml.Node) (int, error)
	visit = func(n *yaml.Node) (int, error) {
		if n.Kind == yaml.AliasNode {
			t := n.Alias
			if t == nil {
				return 0, d.nodeErr(n, "", "alias *%s has no anchor", n.Value)
			}
			switch state[t] {
			case visiting:
				return 0, d.nodeErr(n, "", "alias *%s refers to a node that contains it", n.Value)
			case done:
				return size[t], nil
			}
			return visit(t)
		}
		if state[n] == done { // an anchored node reached again through an alias
			return size[n], nil
		}
		state[n] = visiting
		real++
		total := 1
		for _, c := range n.Content {
			s, err := visit(c)
			if err != nil {
				return 0, err
			}
			total = min(total+s, limit)
		}
		state[n] = done
		if n.Anchor != "" {
			size[n] = total
		}
		return total, nil
	}
	total, err := visit(root)
	if err != nil {
		return err
	}
	if total-real > maxAliasNodes {
		return d.nodeErr(root, "", "aliases expand the document by more than %d nodes; write the values out instead", maxAliasNodes)
	}
	return nil
}

// deref follows an alias to its anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull
}

// describe names what a node is, for messages, without quoting values that
// could be secrets.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case tagNull:
		return "null"
	case tagBool:
		return "a boolean"
	case tagInt, tagFloat:
		return "a number"
	case tagStr:
		return "a string"
	}
	return "a value tagged " + n.ShortTag()
}

// quote quotes a scalar for a message, shortened.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}

// field is one known key of a mapping and how to decode its value.
type field struct {
	key string
	set func(n *yaml.Node, path string) error
}

func keyList(fs []field) string {
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return strings.Join(keys, ", ")
}

// entry is one key of a mapping, merges resolved.
type entry struct {
	key     string
	keyNode *yaml.Node
	val     *yaml.Node
	path    string
}

// fields decodes the mapping n with the known keys fs; a null value leaves
// the field as it is.
func (d *decoder) fields(n *yaml.Node, path string, fs []field) error {
	entries, err := d.mapping(n, path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		i := 0
		for i < len(fs) && fs[i].key != e.key {
			i++
		}
		if i == len(fs) {
			return d.nodeErr(e.keyNode, e.path, "unknown key (known: %s)", keyList(fs))
		}
		if isNull(e.val) {
			continue
		}
		if err := fs[i].set(e.val, e.path); err != nil {
			return err
		}
	}
	return nil
}

// mapping returns the entries of a mapping in file order, with merge keys
// (<<) resolved: explicit keys win over merged ones, and earlier merged
// mappings over later ones. Duplicate keys are refused.
func (d *decoder) mapping(n *yaml.Node, path string) ([]entry, error) {
	n = deref(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.nodeErr(n, path, "must be a mapping of keys to values, not %s", describe(n))
	}
	explicit := map[string]int{} // key -> line
	mergeLine := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if k.Kind != yaml.ScalarNode || k.ShortTag() == tagNull {
			return nil, d.nodeErr(k, path, "a key must be a name, not %s", describe(k))
		}
		if k.ShortTag() == tagMerge {
			if mergeLine > 0 {
				return nil, d.nodeErr(k, path, "mapping key \"<<\" already defined at line %d", mergeLine)
			}
			mergeLine = k.Line
			continue
		}
		if line, dup := explicit[k.Value]; dup {
			return nil, d.nodeErr(k, join(path, k.Value), "mapping key %q already defined at line %d", k.Value, line)
		}
		explicit[k.Value] = k.Line
	}
	var out []entry
	merged := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.ShortTag() != tagMerge {
			out = append(out, d.entry(path, k.Value, k, v))
			continue
		}
		src := deref(v)
		sources := []*yaml.Node{src}
		if src.Kind == yaml.SequenceNode {
			sources = src.Content
		}
		for _, s := range sources {
			if deref(s).Kind != yaml.MappingNode {
				return nil, d.nodeErr(s, path, "<< must merge a mapping or a list of mappings, not %s", describe(s))
			}
			es, err := d.mapping(s, path)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if _, ok := explicit[e.key]; ok || merged[e.key] {
					continue
				}
				merged[e.key] = true
				out = append(out, d.entry(path, e.key, e.keyNode, e.val))
			}
		}
	}
	return out, nil
}

func (d *decoder) entry(path, key string, k, v *yaml.Node) entry {
	p := d.child(path, key)
	d.lines[p] = k.Line
	return entry{key: key, keyNode: k, val: v, path: p}
}

// sequence returns the items of a list (none for null).
func (d *decoder) sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	n = deref(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.nodeErr(n, path, "must be a list, not %s", describe(n))
	}
	for i, item := range n.Content {
		p := index(path, i)
		d.parents[p] = path
		d.lines[p] = cmp.Or(deref(item).Line, n.Line)
	}
	return n.Content, nil
}

// scalar returns the scalar at n, or says it must be what.
func (d *decoder) scalar(n *yaml.Node, path, what string) (*yaml.Node, error) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		return nil, d.nodeErr(n, path, "must be %s, not %s", what, describe(n))
	}
	return n, nil
}

// stringValue reads a string; plain numbers, booleans and dates count as
// their text (a password of 0123 stays "0123").
func (d *decoder) stringValue(n *yaml.Node, path string) (string, error) {
	s, err := d.scalar(n, path, "a string")
	if err != nil {
		return "", err
	}
	switch s.ShortTag() {
	case tagStr, tagInt, tagFloat, tagBool, tagTimestamp:
		return s.Value, nil
	}
	return "", d.nodeErr(s, path, "must be a string, not %s", describe(s))
}

func (d *decoder) str(dst *string) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		s, err := d.stringValue(n, path)
		if err != nil {
			return err
		}
		*dst = s
		return nil
	}
}

func (d *decoder) strList(dst *[]string) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		items, err := d.sequence(n, path)
		if err != nil {
			return err
		}
		out := make([]string, len(items))
		for i, item := range items {
			if out[i], err = d.stringValue(item, index(path, i)); err != nil {
				return err
			}
		}
		*dst = out
		return nil
	}
}

func (d *decoder) boolean(dst *bool) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		s, err := d.scalar(n, path, "true or false")
		if err != nil {
			return err
		}
		if s.ShortTag() != tagBool || s.Decode(dst) != nil {
			return d.nodeErr(s, path, "%s is not true or false", quote(s.Value))
		}
		return nil
	}
}

func (d *decoder) integer(dst *int) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		s, err := d.scalar(n, path, "a whole number")
		if err != nil {
			return err
		}
		var v int64
		if s.ShortTag() != tagInt || s.Decode(&v) != nil || v > math.MaxInt32 || v < math.MinInt32 {
			return d.nodeErr(s, path, "%s is not a whole number", quote(s.Value))
		}
		if v < 0 {
			return d.nodeErr(s, path, "%d must not be negative", v)
		}
		*dst = int(v)
		return nil
	}
}

func (d *decoder) durationValue(n *yaml.Node, path string) (time.Duration, error) {
	s, err := d.scalar(n, path, "a duration")
	if err != nil {
		return 0, err
	}
	v, err := parseDuration(s.Value)
	if err != nil || s.ShortTag() != tagStr && s.ShortTag() != tagInt {
		return 0, d.nodeErr(s, path, "%s is not a duration (use e.g. 30s, 5m)", quote(s.Value))
	}
	if v < 0 {
		return 0, d.nodeErr(s, path, "%s must not be negative", quote(s.Value))
	}
	return v, nil
}

func (d *decoder) duration(dst *time.Duration) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		v, err := d.durationValue(n, path)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}
}

func (d *decoder) durList(dst *[]time.Duration) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		items, err := d.sequence(n, path)
		if err != nil {
			return err
		}
		out := make([]time.Duration, len(items))
		for i, item := range items {
			if out[i], err = d.durationValue(item, index(path, i)); err != nil {
				return err
			}
		}
		*dst = out
		return nil
	}
}

func (d *decoder) size(dst *int64) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error {
		s, err := d.scalar(n, path, "a size")
		if err != nil {
			return err
		}
		v, ok := parseSize(s.Value)
		if !ok || s.ShortTag() != tagStr && s.ShortTag() != tagInt {
			return d.nodeErr(s, path, "%s is not a size (use e.g. 1MiB, 512KiB, 10MB or a byte count)", quote(s.Value))
		}
		*dst = v
		return nil
	}
}

// nested decodes a mapping value with its own keys.
func (d *decoder) nested(fs func() []field) func(*yaml.Node, string) error {
	return func(n *yaml.Node, path string) error { return d.fields(n, path, fs()) }
}

// tagged is the field table of the struct v points at, read from its yaml
// tags in field order (see Config): the key, and a decoder chosen by the
// field's type, or by hand for ",custom".
func (d *decoder) tagged(v any) []field {
	rv := reflect.ValueOf(v).Elem()
	t := rv.Type()
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		key, opt, _ := strings.Cut(tag, ",")
		fv := rv.Field(i)
		switch opt {
		case "custom":
			fs = append(fs, d.custom(t.Name()+"."+sf.Name, rv.Addr().Interface())...)
		case "size":
			fs = append(fs, field{key, d.size(fv.Addr().Interface().(*int64))})
		case "":
			fs = append(fs, field{key, d.typed(fv, t.Name()+"."+sf.Name)})
		default:
			panic(fmt.Sprintf("config: %s.%s: unknown yaml tag option %q", t.Name(), sf.Name, opt))
		}
	}
	return fs
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	durationsType = reflect.TypeFor[[]time.Duration]()
	stringsType   = reflect.TypeFor[[]string]()
)

// typed is the decoder of a tagged field, by its type. A type it does not
// know is a programming error, found by any test that loads a file.
func (d *decoder) typed(fv reflect.Value, name string) func(*yaml.Node, string) error {
	switch fv.Type() {
	case durationType:
		return d.duration(fv.Addr().Interface().(*time.Duration))
	case durationsType:
		return d.durList(fv.Addr().Interface().(*[]time.Duration))
	case stringsType:
		return d.strList(fv.Addr().Interface().(*[]string))
	}
	switch fv.Kind() {
	case reflect.String: // string and named string types (debounce.Mode, ...)
		return func(n *yaml.Node, path string) error {
			s, err := d.stringValue(n, path)
			if err == nil {
				fv.SetString(s)
			}
			return err
		}
	case reflect.Bool:
		return d.boolean(fv.Addr().Interface().(*bool))
	case reflect.Int:
		return d.integer(fv.Addr().Interface().(*int))
	case reflect.Struct:
		return d.nested(func() []field { return d.tagged(fv.Addr().Interface()) })
	}
	panic(fmt.Sprintf("config: %s: no YAML decoder for %s; give it a ,custom one in decode.go", name, fv.Type()))
}

// custom is the fields of the keys read by hand, by struct and field name;
// v points at the struct.
func (d *decoder) custom(name string, v any) []field {
	switch name {
	case "Config.Policies":
		c := v.(*Config)
		return []field{{"policies", func(n *yaml.Node, path string) error { return d.policies(n, path, c) }}}
	case "Config.Cron":
		c := v.(*Config)
		return []field{{"cron", func(n *yaml.Node, path string) error { return d.cron(n, path, c) }}}
	case "Redis.Addrs":
		r := v.(*Redis)
		return []field{{"addrs", func(n *yaml.Node, path string) error {
			if len(r.Addrs) > 0 {
				return d.nodeErr(n, path, "redis.sentinel.addrs is set too; use addrs for a Cluster, sentinel.addrs for Sentinel")
			}
			d.addrsPath = path
			return d.strList(&r.Addrs)(n, path)
		}}}
	case "Redis.SentinelMaster":
		r := v.(*Redis)
		return []field{{"sentinel", d.nested(func() []field { return d.sentinelFields(r) })}}
	case "NATS.URLs":
		return d.natsURLFields(v.(*NATS))
	case "CronRule.Args":
		r := v.(*CronRule)
		return []field{{"args", func(n *yaml.Node, path string) error {
			var b bytes.Buffer
			if err := d.argsJSON(&b, n, path); err != nil {
				return err
			}
			r.Args = b.Bytes()
			return nil
		}}}
	}
	panic("config: no custom YAML decoder for " + name)
}

func (d *decoder) sentinelFields(r *Redis) []field {
	return []field{
		{"master", d.str(&r.SentinelMaster)},
		{"addrs", func(n *yaml.Node, path string) error {
			if len(r.Addrs) > 0 {
				return d.nodeErr(n, path, "redis.addrs is set too; use addrs for a Cluster, sentinel.addrs for Sentinel")
			}
			d.addrsPath = path
			return d.strList(&r.Addrs)(n, path)
		}},
	}
}

// natsURLFields are url (a URL or a comma-separated list) and urls (a
// list): one of them.
func (d *decoder) natsURLFields(c *NATS) []field {
	urlSet := false
	return []field{
		{"url", func(n *yaml.Node, path string) error {
			s, err := d.stringValue(n, path)
			if err != nil {
				return err
			}
			if urlSet {
				return d.nodeErr(n, path, "nats.urls is set too; use one of url and urls")
			}
			urlSet = true
			d.urlsPath = path
			c.URLs = splitList(s)
			return nil
		}},
		{"urls", func(n *yaml.Node, path string) error {
			if urlSet {
				return d.nodeErr(n, path, "nats.url is set too; use one of url and urls")
			}
			urlSet = true
			d.urlsPath = path
			return d.strList(&c.URLs)(n, path)
		}},
	}
}

// policies decodes the policies mapping: job type -> policy, in file order.
func (d *decoder) policies(n *yaml.Node, path string, c *Config) error {
	entries, err := d.mapping(n, path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := debounce.Policy{Type: e.key}
		if err := d.fields(e.val, e.path, d.tagged(&p)); err != nil {
			return err
		}
		c.Policies = append(c.Policies, p)
	}
	return nil
}

// cron decodes the list of cron rules.
func (d *decoder) cron(n *yaml.Node, path string, c *Config) error {
	items, err := d.sequence(n, path)
	if err != nil {
		return err
	}
	for i, item := range items {
		r := CronRule{Timezone: DefaultTimezone}
		p := index(path, i)
		if isNull(item) {
			return d.nodeErr(item, p, "an empty rule; give it name, schedule and type")
		}
		if err := d.fields(item, p, d.tagged(&r)); err != nil {
			return err
		}
		if r.Args == nil {
			r.Args = []byte("{}")
		}
		if r.Timezone == "" {
			r.Timezone = DefaultTimezone
		}
		c.Cron = append(c.Cron, r)
	}
	return nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
