package vredis

import (
	"encoding"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// argString is a command argument as go-redis writes it on the wire.
func argString(a any) string {
	switch v := a.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int8:
		return strconv.FormatInt(int64(v), 10)
	case int16:
		return strconv.FormatInt(int64(v), 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint:
		return strconv.FormatUint(uint64(v), 10)
	case uint8:
		return strconv.FormatUint(uint64(v), 10)
	case uint16:
		return strconv.FormatUint(uint64(v), 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 64)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10)
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			return ""
		}
		return string(b)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(a)
}

const (
	msgWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	msgNotInt    = "ERR value is not an integer or out of range"
	msgSyntax    = "ERR syntax error"
	msgHashInt   = "ERR hash value is not an integer"
)

func wrongArgs(name string) errReply {
	return errReply(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
}

// commandNames maps the spellings scripts use to the lower-case name,
// sparing a ToLower per call.
var commandNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"ping", "get", "set", "incrby", "incr", "decr", "decrby", "del", "unlink", "exists", "type",
		"pexpire", "expire", "pexpireat", "expireat", "pttl", "ttl", "pexpiretime", "expiretime", "persist", "rename",
		"hset", "hmset", "hsetnx", "hget", "hmget", "hincrby", "hgetall", "hdel", "hexists", "hlen", "keys", "scan", "info"} {
		m[n], m[strings.ToUpper(n)] = n, n
	}
	return m
}()

// lookup returns a live key's value (nil when absent or expired).
func (s *Server) lookup(key string) *value {
	v := s.keys[key]
	if v != nil && v.exp != 0 && s.nowMs() > v.exp {
		delete(s.keys, key)
		s.stats.Expired++
		return nil
	}
	return v
}

// command runs one command other than the scripting ones.
func (s *Server) command(a []string) any {
	s.stats.Commands++
	name, ok := commandNames[a[0]]
	if !ok {
		name = strings.ToLower(a[0])
	}
	args := a[1:]
	switch name {
	case "ping":
		if len(args) == 1 {
			return args[0]
		}
		return Status("PONG")
	case "get":
		if len(args) != 1 {
			return wrongArgs(name)
		}
		v := s.lookup(args[0])
		switch {
		case v == nil:
			return nil
		case v.isHash:
			return errReply(msgWrongType)
		}
		return v.str
	case "set":
		return s.set(args)
	case "incrby", "incr", "decr", "decrby":
		return s.incr(name, args)
	case "del", "unlink":
		if len(args) == 0 {
			return wrongArgs(name)
		}
		n := int64(0)
		for _, k := range args {
			if s.lookup(k) != nil {
				delete(s.keys, k)
				n++
			}
		}
		return n
	case "exists":
		if len(args) == 0 {
			return wrongArgs(name)
		}
		n := int64(0)
		for _, k := range args {
			if s.lookup(k) != nil {
				n++
			}
		}
		return n
	case "type":
		if len(args) != 1 {
			return wrongArgs(name)
		}
		v := s.lookup(args[0])
		switch {
		case v == nil:
			return Status("none")
		case v.isHash:
			return Status("hash")
		}
		return Status("string")
	case "pexpire", "expire", "pexpireat", "expireat":
		return s.expireCmd(name, args)
	case "pttl", "ttl", "pexpiretime", "expiretime":
		return s.ttlCmd(name, args)
	case "persist":
		if len(args) != 1 {
			return wrongArgs(name)
		}
		v := s.lookup(args[0])
		if v == nil || v.exp == 0 {
			return int64(0)
		}
		v.exp = 0
		return int64(1)
	case "rename":
		if len(args) != 2 {
			return wrongArgs(name)
		}
		v := s.lookup(args[0])
		if v == nil {
			return errReply("ERR no such key")
		}
		delete(s.keys, args[0])
		s.keys[args[1]] = v
		s.setExpiry(args[1], v, v.exp) // keeps its expiry, under its new name
		return Status("OK")
	case "hset", "hmset", "hsetnx", "hget", "hmget", "hincrby", "hgetall", "hdel", "hexists", "hlen":
		return s.hashCmd(name, args)
	case "info":
		// A lone primary: no replica to wait for.
		return "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
	case "keys":
		if len(args) != 1 {
			return wrongArgs(name)
		}
		out := []any{}
		for _, k := range s.sortedKeys() {
			if globMatch(args[0], k) {
				out = append(out, k)
			}
		}
		return out
	case "scan":
		return s.scan(args)
	case "multi", "exec":
		return errReply(fmt.Sprintf("ERR %s: send MULTI/EXEC as a go-redis TxPipeline", strings.ToUpper(name)))
	}
	return errReply(fmt.Sprintf("ERR unknown command '%s': the simulator's in-process Redis (internal/vredis) implements only the commands coalesce uses", name))
}

// set is SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
func (s *Server) set(args []string) any {
	if len(args) < 2 {
		return wrongArgs("set")
	}
	key, val := args[0], args[1]
	var nx, xx, get, keep bool
	exp := int64(0)
	now := s.nowMs()
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(args[i])
		switch opt {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GET":
			get = true
		case "KEEPTTL":
			keep = true
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 >= len(args) || exp != 0 {
				return errReply(msgSyntax)
			}
			i++
			n, err := strconv.ParseInt(args[i], 10, 64)
			if err != nil {
				return errReply(msgNotInt)
			}
			if n <= 0 {
				return errReply("ERR invalid expire time in 'set' command")
			}
			switch opt {
			case "EX":
				exp = now + n*1000
			case "PX":
				exp = now + n
			case "EXAT":
				exp = n * 1000
			default:
				exp = n
			}
		default:
			return errReply(msgSyntax)
		}
	}
	if nx && xx || keep && exp != 0 {
		return errReply(msgSyntax)
	}
	old := s.lookup(key)
	var prev any
	if get && old != nil {
		if old.isHash {
			return errReply(msgWrongType)
		}
		prev = old.str
	}
	if nx && old != nil || xx && old == nil {
		return prev // nil: not set
	}
	v := &value{str: val}
	s.keys[key] = v
	switch {
	case keep && old != nil:
		v.exp = old.exp
	case exp != 0:
		s.setExpiry(key, v, exp)
	}
	if get {
		return prev
	}
	return Status("OK")
}

func (s *Server) incr(name string, args []string) any {
	by := int64(1)
	switch name {
	case "incrby", "decrby":
		if len(args) != 2 {
			return wrongArgs(name)
		}
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return errReply(msgNotInt)
		}
		by = n
	default:
		if len(args) != 1 {
			return wrongArgs(name)
		}
	}
	if strings.HasPrefix(name, "decr") {
		by = -by
	}
	v := s.lookup(args[0])
	cur := int64(0)
	if v != nil {
		if v.isHash {
			return errReply(msgWrongType)
		}
		n, err := strconv.ParseInt(v.str, 10, 64)
		if err != nil {
			return errReply(msgNotInt)
		}
		cur = n
	} else {
		v = &value{}
		s.keys[args[0]] = v
	}
	if by > 0 && cur > math.MaxInt64-by || by < 0 && cur < math.MinInt64-by {
		return errReply("ERR increment or decrement would overflow")
	}
	cur += by
	v.str = strconv.FormatInt(cur, 10)
	return cur
}

func (s *Server) expireCmd(name string, args []string) any {
	if len(args) != 2 {
		return wrongArgs(name)
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		return errReply(msgNotInt)
	}
	v := s.lookup(args[0])
	if v == nil {
		return int64(0)
	}
	now := s.nowMs()
	var at int64
	switch name {
	case "pexpire":
		at = now + n
	case "expire":
		at = now + n*1000
	case "pexpireat":
		at = n
	default:
		at = n * 1000
	}
	if at <= now {
		// An expiry in the past deletes the key, as Redis does.
		delete(s.keys, args[0])
		return int64(1)
	}
	s.setExpiry(args[0], v, at)
	return int64(1)
}

func (s *Server) ttlCmd(name string, args []string) any {
	if len(args) != 1 {
		return wrongArgs(name)
	}
	v := s.lookup(args[0])
	switch {
	case v == nil:
		return int64(-2)
	case v.exp == 0:
		return int64(-1)
	}
	switch name {
	case "pttl":
		return v.exp - s.nowMs()
	case "ttl":
		return (v.exp - s.nowMs() + 500) / 1000
	case "pexpiretime":
		return v.exp
	}
	return (v.exp + 500) / 1000
}

// hashOf returns key's hash, creating it when create is set; a string key
// is a WRONGTYPE error.
func (s *Server) hashOf(key string, create bool) (*value, any) {
	v := s.lookup(key)
	if v == nil {
		if !create {
			return nil, nil
		}
		v = &value{isHash: true, hash: make(map[string]string, 8)}
		s.keys[key] = v
		return v, nil
	}
	if !v.isHash {
		return nil, errReply(msgWrongType)
	}
	return v, nil
}

func (s *Server) hashCmd(name string, args []string) any {
	if len(args) < 1 {
		return wrongArgs(name)
	}
	key := args[0]
	switch name {
	case "hset", "hmset":
		if len(args) < 3 || len(args)%2 == 0 {
			return wrongArgs(name)
		}
		v, e := s.hashOf(key, true)
		if e != nil {
			return e
		}
		n := int64(0)
		for i := 1; i+1 < len(args); i += 2 {
			if _, ok := v.hash[args[i]]; !ok {
				n++
			}
			v.hash[args[i]] = args[i+1]
		}
		if name == "hmset" {
			return Status("OK")
		}
		return n
	case "hsetnx":
		if len(args) != 3 {
			return wrongArgs(name)
		}
		v, e := s.hashOf(key, true)
		if e != nil {
			return e
		}
		if _, ok := v.hash[args[1]]; ok {
			return int64(0)
		}
		v.hash[args[1]] = args[2]
		return int64(1)
	case "hincrby":
		if len(args) != 3 {
			return wrongArgs(name)
		}
		by, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return errReply(msgNotInt)
		}
		v, e := s.hashOf(key, true)
		if e != nil {
			return e
		}
		cur := int64(0)
		if old, ok := v.hash[args[1]]; ok {
			if cur, err = strconv.ParseInt(old, 10, 64); err != nil {
				return errReply(msgHashInt)
			}
		}
		cur += by
		v.hash[args[1]] = strconv.FormatInt(cur, 10)
		return cur
	}
	v, e := s.hashOf(key, false)
	if e != nil {
		return e
	}
	switch name {
	case "hget":
		if len(args) != 2 {
			return wrongArgs(name)
		}
		if v == nil {
			return nil
		}
		f, ok := v.hash[args[1]]
		if !ok {
			return nil
		}
		return f
	case "hmget":
		if len(args) < 2 {
			return wrongArgs(name)
		}
		out := make([]any, len(args)-1)
		for i, f := range args[1:] {
			if v != nil {
				if x, ok := v.hash[f]; ok {
					out[i] = x
				}
			}
		}
		return out
	case "hgetall":
		if len(args) != 1 {
			return wrongArgs(name)
		}
		if v == nil {
			return []any{}
		}
		out := make([]any, 0, 2*len(v.hash))
		for f, x := range v.hash {
			out = append(out, f, x)
		}
		return out
	case "hdel":
		if len(args) < 2 {
			return wrongArgs(name)
		}
		n := int64(0)
		if v != nil {
			for _, f := range args[1:] {
				if _, ok := v.hash[f]; ok {
					delete(v.hash, f)
					n++
				}
			}
			if len(v.hash) == 0 {
				delete(s.keys, key)
			}
		}
		return n
	case "hexists":
		if len(args) != 2 {
			return wrongArgs(name)
		}
		if v == nil {
			return int64(0)
		}
		if _, ok := v.hash[args[1]]; ok {
			return int64(1)
		}
		return int64(0)
	default: // hlen
		if v == nil {
			return int64(0)
		}
		return int64(len(v.hash))
	}
}

// sortedKeys returns the live keys in order.
func (s *Server) sortedKeys() []string {
	now := s.nowMs()
	out := make([]string, 0, len(s.keys))
	for k, v := range s.keys {
		if v.exp == 0 || now <= v.exp {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// scan is SCAN cursor [MATCH pattern] [COUNT n] [TYPE t], over the keys in
// order: a cursor stands for the last key it returned, so keys that exist
// throughout a scan are all returned once, whatever changes meanwhile.
func (s *Server) scan(args []string) any {
	if len(args) < 1 {
		return wrongArgs("scan")
	}
	cursor, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return errReply("ERR invalid cursor")
	}
	match, typ, count := "*", "", 10
	for i := 1; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return errReply(msgSyntax)
		}
		switch strings.ToUpper(args[i]) {
		case "MATCH":
			match = args[i+1]
		case "COUNT":
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n < 1 {
				return errReply(msgNotInt)
			}
			count = n
		case "TYPE":
			typ = strings.ToLower(args[i+1])
		default:
			return errReply(msgSyntax)
		}
	}
	after := ""
	if cursor != 0 {
		var ok bool
		if after, ok = s.cursors[cursor]; !ok {
			return []any{"0", []any{}}
		}
		delete(s.cursors, cursor)
	}
	keys := s.sortedKeys()
	i, _ := slices.BinarySearch(keys, after)
	if i < len(keys) && keys[i] == after && cursor != 0 {
		i++
	}
	out := []any{}
	end := min(i+count, len(keys))
	for _, k := range keys[i:end] {
		if typ != "" {
			kind := "string"
			if s.keys[k].isHash {
				kind = "hash"
			}
			if kind != typ {
				continue
			}
		}
		if globMatch(match, k) {
			out = append(out, k)
		}
	}
	next := "0"
	if end < len(keys) {
		if len(s.cursors) > 1024 {
			clear(s.cursors) // scans abandoned half-way
		}
		s.cursorSeq++
		s.cursors[s.cursorSeq] = keys[end-1]
		next = strconv.FormatUint(s.cursorSeq, 10)
	}
	return []any{next, out}
}

// globMatch is Redis's glob: * ? [abc] [^a] [a-z] and \ escapes.
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 0 && pattern[0] == '*' {
				pattern = pattern[1:]
			}
			if pattern == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(pattern, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			pattern, s = pattern[1:], s[1:]
		case '[':
			if s == "" {
				return false
			}
			end := strings.IndexByte(pattern[1:], ']')
			if end < 0 {
				return pattern == s // an unclosed bracket matches itself
			}
			class := pattern[1 : 1+end]
			neg := strings.HasPrefix(class, "^")
			if neg {
				class = class[1:]
			}
			hit := false
			for j := 0; j < len(class); j++ {
				if j+2 < len(class) && class[j+1] == '-' {
					if class[j] <= s[0] && s[0] <= class[j+2] {
						hit = true
					}
					j += 2
				} else if class[j] == s[0] {
					hit = true
				}
			}
			if hit == neg {
				return false
			}
			pattern, s = pattern[2+end:], s[1:]
		case '\\':
			if len(pattern) > 1 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != pattern[0] {
				return false
			}
			pattern, s = pattern[1:], s[1:]
		}
	}
	return s == ""
}
