package devservers

import (
	"strconv"
	"strings"
)

// What the store does with each command before miniredis runs it: the
// writes it journals (and which part of which keys they change), the
// relative expiries it turns absolute, and the writes it refuses (types it
// does not journal).

// level is how much of a key a command may have changed: the record written
// after it carries that much of the key's new state.
type level uint8

const (
	touchExpiry level = iota + 1 // its expiry only
	touchFields                  // some fields of a hash (and maybe its expiry)
	touchKey                     // anything: the whole key is written down
)

// keysOf is how a write command names the keys it changes.
type keysOf uint8

const (
	firstKey   keysOf = iota // args[0]
	everyArg                 // args[0:]
	everyOther               // args[0], args[2], ... (MSET)
	firstTwo                 // args[0] and args[1] (RENAME)
	secondKey                // args[1] (COPY's destination)
	hashFields               // args[0], fields args[1], args[3], ... (HSET)
	hashField                // args[0], field args[1] (HSETNX, HINCRBY)
	hashDel                  // args[0], fields args[1:] (HDEL)
)

type writeSpec struct {
	level level
	keys  keysOf
}

// journaled are the write commands of strings, hashes and expiries: the
// ones coalesce sends (directly or from its scripts) and their kin.
var journaled = map[string]writeSpec{
	"SET": {touchKey, firstKey}, "SETNX": {touchKey, firstKey}, "SETEX": {touchKey, firstKey},
	"PSETEX": {touchKey, firstKey}, "GETSET": {touchKey, firstKey}, "GETDEL": {touchKey, firstKey},
	"APPEND": {touchKey, firstKey}, "SETRANGE": {touchKey, firstKey}, "DELEX": {touchKey, firstKey},
	"INCR": {touchKey, firstKey}, "INCRBY": {touchKey, firstKey}, "INCRBYFLOAT": {touchKey, firstKey},
	"DECR": {touchKey, firstKey}, "DECRBY": {touchKey, firstKey},
	"MSET": {touchKey, everyOther}, "MSETNX": {touchKey, everyOther},
	"DEL": {touchKey, everyArg}, "UNLINK": {touchKey, everyArg},
	"RENAME": {touchKey, firstTwo}, "RENAMENX": {touchKey, firstTwo}, "COPY": {touchKey, secondKey},
	"EXPIRE": {touchExpiry, firstKey}, "PEXPIRE": {touchExpiry, firstKey}, "EXPIREAT": {touchExpiry, firstKey},
	"PEXPIREAT": {touchExpiry, firstKey}, "PERSIST": {touchExpiry, firstKey}, "GETEX": {touchExpiry, firstKey},
	"HSET": {touchFields, hashFields}, "HMSET": {touchFields, hashFields}, "HSETNX": {touchFields, hashField},
	"HINCRBY": {touchFields, hashField}, "HINCRBYFLOAT": {touchFields, hashField}, "HDEL": {touchFields, hashDel},
}

// passed are the commands miniredis counts as writes that change no data
// (connections, scripts, transactions, pub/sub): they run as they are.
// FLUSHALL, FLUSHDB, SELECT, TIME, MULTI, EXEC and DISCARD are handled
// on their own.
var passed = map[string]bool{
	"AUTH": true, "CLIENT": true, "CLUSTER": true, "COMMAND": true, "ECHO": true, "HELLO": true,
	"INFO": true, "MEMORY": true, "OBJECT": true, "PING": true, "QUIT": true, "WAIT": true,
	"EVAL": true, "EVALSHA": true, "EVAL_RO": true, "EVALSHA_RO": true, "SCRIPT": true,
	"WATCH": true, "UNWATCH": true,
	"PUBLISH": true, "PUBSUB": true, "SUBSCRIBE": true, "PSUBSCRIBE": true, "UNSUBSCRIBE": true, "PUNSUBSCRIBE": true,
}

// refusal is the error a command of a kind the store does not journal gets.
func refusal(cmd string) string {
	return "ERR the embedded store keeps strings and hashes, and journals their writes; it does not run " + cmd +
		" (point coalesce at a real Redis with --redis for it)"
}

// touchKeys calls add for each key a write command may change.
func touchKeys(sp writeSpec, args []string, add func(key string, l level, fields []string)) {
	if len(args) == 0 {
		return
	}
	switch sp.keys {
	case firstKey:
		add(args[0], sp.level, nil)
	case everyArg:
		for _, k := range args {
			add(k, sp.level, nil)
		}
	case everyOther:
		for i := 0; i < len(args); i += 2 {
			add(args[i], sp.level, nil)
		}
	case firstTwo:
		add(args[0], sp.level, nil)
		if len(args) > 1 {
			add(args[1], sp.level, nil)
		}
	case secondKey:
		if len(args) > 1 {
			add(args[1], sp.level, nil)
		}
	case hashFields:
		var fields []string
		for i := 1; i < len(args); i += 2 {
			fields = append(fields, args[i])
		}
		add(args[0], sp.level, fields)
	case hashField:
		if len(args) > 1 {
			add(args[0], sp.level, args[1:2])
		}
	case hashDel:
		add(args[0], sp.level, args[1:])
	}
}

// absolute rewrites a write with a relative expiry (EX, PX, EXPIRE,
// PEXPIRE, SETEX, PSETEX) into one with an absolute one (PXAT, PEXPIREAT)
// at now (unix ms): the embedded Redis's clock stands still, so only
// absolute times mean what they say there. An expiry time that has passed
// becomes 0, which miniredis takes as "expire now" (as Redis does). Invalid
// arguments are left for miniredis to refuse.
func absolute(now int64, cmd string, args []string) (string, []string, bool) {
	num := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && n > -1<<50 && n < 1<<50
	}
	switch cmd {
	case "SET", "GETEX":
		from := 2 // SET key value [options]
		if cmd == "GETEX" {
			from = 1
		}
		for i := from; i < len(args)-1; i++ {
			opt := strings.ToUpper(args[i])
			switch opt {
			case "EX", "PX":
				n, ok := num(args[i+1])
				if !ok || n <= 0 {
					return cmd, args, false
				}
				unit := int64(1)
				if opt == "EX" {
					unit = 1000
				}
				out := append([]string(nil), args...)
				out[i], out[i+1] = "PXAT", strconv.FormatInt(now+n*unit, 10)
				return cmd, out, true
			case "EXAT", "PXAT":
				i++
			}
		}
	case "SETEX", "PSETEX": // key seconds|ms value
		if len(args) != 3 {
			return cmd, args, false
		}
		n, ok := num(args[1])
		if !ok || n <= 0 {
			return cmd, args, false
		}
		unit := int64(1)
		if cmd == "SETEX" {
			unit = 1000
		}
		return "SET", []string{args[0], args[2], "PXAT", strconv.FormatInt(now+n*unit, 10)}, true
	case "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT": // key n [NX|XX|GT|LT]
		if len(args) < 2 {
			return cmd, args, false
		}
		n, ok := num(args[1])
		if !ok {
			return cmd, args, false
		}
		var a int64
		switch cmd {
		case "EXPIRE":
			a = now + n*1000
		case "PEXPIRE":
			a = now + n
		case "EXPIREAT":
			a = n * 1000
		default:
			a = n
		}
		if a <= now {
			a = 0
		}
		if cmd == "PEXPIREAT" && a == n {
			return cmd, args, false
		}
		out := append([]string{args[0], strconv.FormatInt(a, 10)}, args[2:]...)
		return "PEXPIREAT", out, true
	}
	return cmd, args, false
}
