package vredis

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// The scripts run as Redis runs them: one Lua state for all (each script's
// locals are its own), KEYS and ARGV set per call, redis.call and
// redis.pcall into the keyspace, replies converted both ways by Redis's
// rules (nil -> false, status -> {ok=...}, error -> {err=...}; numbers back
// to integers, truncated). Nothing interleaves with a script.

type script struct {
	fn *lua.LFunction
}

type luaEngine struct {
	L          *lua.LState
	s          *Server
	keys, argv *lua.LTable            // KEYS and ARGV, refilled per call
	args       []string               // a redis.call's arguments, reused
	statuses   map[Status]*lua.LTable // {ok=...} tables, shared: scripts only read them
}

func newLuaEngine(s *Server) *luaEngine {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	e := &luaEngine{L: L, s: s, keys: L.CreateTable(8, 0), argv: L.CreateTable(16, 0), statuses: map[Status]*lua.LTable{}}
	L.SetGlobal("KEYS", e.keys)
	L.SetGlobal("ARGV", e.argv)
	mod := L.NewTable()
	L.SetField(mod, "call", L.NewFunction(func(L *lua.LState) int { return e.call(L, false) }))
	L.SetField(mod, "pcall", L.NewFunction(func(L *lua.LState) int { return e.call(L, true) }))
	L.SetField(mod, "error_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		L.SetField(t, "err", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	L.SetField(mod, "status_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		L.SetField(t, "ok", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	L.SetField(mod, "log", L.NewFunction(func(*lua.LState) int { return 0 }))
	for i, name := range []string{"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		L.SetField(mod, name, lua.LNumber(i))
	}
	L.SetGlobal("redis", mod)
	openCJSON(L)
	return e
}

func (e *luaEngine) close() { e.L.Close() }

// compile parses and compiles a script once.
func (e *luaEngine) compile(src string) (*script, error) {
	chunk, err := parse.Parse(strings.NewReader(src), "@user_script")
	if err != nil {
		return nil, err
	}
	proto, err := lua.Compile(chunk, "@user_script")
	if err != nil {
		return nil, err
	}
	// A chunk is a vararg function; under gopher-lua's Lua 5.0 "arg"
	// compatibility each call would build an arg table nobody reads (Redis
	// scripts take KEYS and ARGV): a sixth of a call's time.
	proto.IsVarArg &^= lua.VarArgNeedsArg
	return &script{fn: e.L.NewFunctionFromProto(proto)}, nil
}

func sha1Hex(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}

// eval is EVAL / EVALSHA: args are the script (or its SHA-1), numkeys, keys
// and arguments.
func (s *Server) eval(name string, args []any) any {
	if len(args) < 2 {
		return wrongArgs(name)
	}
	s.stats.Scripts++
	var sc *script
	if strings.HasPrefix(name, "evalsha") {
		sc = s.scripts[strings.ToLower(argString(args[0]))]
		if sc == nil {
			return errReply("NOSCRIPT No matching script. Please use EVAL.")
		}
	} else {
		src := argString(args[0])
		sha := sha1Hex(src)
		if sc = s.scripts[sha]; sc == nil {
			var err error
			if sc, err = s.lua.compile(src); err != nil {
				return errReply(fmt.Sprintf("ERR Error compiling script (new function): %v", err))
			}
			s.scripts[sha] = sc
		}
	}
	nkeys, err := strconv.Atoi(argString(args[1]))
	if err != nil {
		return errReply(msgNotInt)
	}
	if nkeys < 0 || nkeys > len(args)-2 {
		return errReply("ERR Number of keys can't be greater than number of args")
	}
	return s.lua.run(sc, args[2:2+nkeys], args[2+nkeys:])
}

// scriptCmd is SCRIPT LOAD / EXISTS / FLUSH.
func (s *Server) scriptCmd(args []any) any {
	if len(args) == 0 {
		return wrongArgs("script")
	}
	switch strings.ToLower(argString(args[0])) {
	case "load":
		if len(args) != 2 {
			return wrongArgs("script|load")
		}
		src := argString(args[1])
		sha := sha1Hex(src)
		if s.scripts[sha] == nil {
			sc, err := s.lua.compile(src)
			if err != nil {
				return errReply(fmt.Sprintf("ERR Error compiling script (new function): %v", err))
			}
			s.scripts[sha] = sc
		}
		return sha
	case "exists":
		out := make([]any, len(args)-1)
		for i, a := range args[1:] {
			out[i] = int64(0)
			if s.scripts[strings.ToLower(argString(a))] != nil {
				out[i] = int64(1)
			}
		}
		return out
	case "flush":
		s.scripts = make(map[string]*script)
		return Status("OK")
	}
	return errReply("ERR unknown SCRIPT subcommand")
}

func (e *luaEngine) run(sc *script, keys, argv []any) any {
	L := e.L
	refill(e.keys, keys)
	refill(e.argv, argv)
	top := L.GetTop()
	L.Push(sc.fn)
	if err := L.PCall(0, 1, nil); err != nil {
		L.SetTop(top)
		return errReply(scriptError(err))
	}
	ret := L.Get(-1)
	L.SetTop(top)
	return fromLua(ret)
}

// refill sets t to the array of vals, clearing what a longer one left.
func refill(t *lua.LTable, vals []any) {
	for i, v := range vals {
		t.RawSetInt(i+1, lua.LString(argString(v)))
	}
	for i := len(vals) + 1; t.RawGetInt(i) != lua.LNil; i++ {
		t.RawSetInt(i, lua.LNil)
	}
}

// scriptError is a failed script's error reply: the error a redis.call
// raised keeps its code (WRONGTYPE ...), as Redis 7 does.
func scriptError(err error) string {
	if ae, ok := err.(*lua.ApiError); ok {
		if t, ok := ae.Object.(*lua.LTable); ok {
			if m, ok := t.RawGetString("err").(lua.LString); ok {
				return string(m) + " script: user_script"
			}
		}
		msg := ae.Object.String()
		return "ERR user_script: " + msg
	}
	return "ERR " + err.Error()
}

// call is redis.call (raise on an error reply) and redis.pcall (return it
// as {err=...}).
func (e *luaEngine) call(L *lua.LState, protected bool) int {
	n := L.GetTop()
	if n == 0 {
		L.RaiseError("Please specify at least one argument for this redis lib call")
		return 0
	}
	args := e.args[:0]
	for i := 1; i <= n; i++ {
		args = append(args, "")
		switch v := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = string(v)
		case lua.LNumber:
			args[i-1] = luaNumber(float64(v))
		default:
			L.RaiseError("Lua redis lib command arguments must be strings or integers")
			return 0
		}
	}
	e.args = args
	r := e.s.command(args)
	if er, ok := r.(errReply); ok {
		t := L.NewTable()
		L.SetField(t, "err", lua.LString(string(er)))
		if !protected {
			L.Error(t, 1)
			return 0
		}
		L.Push(t)
		return 1
	}
	if st, ok := r.(Status); ok {
		t := e.statuses[st]
		if t == nil {
			t = toLua(L, st).(*lua.LTable)
			e.statuses[st] = t
		}
		L.Push(t)
		return 1
	}
	L.Push(toLua(L, r))
	return 1
}

// luaNumber formats a Lua number given to redis.call as Redis does (%.17g):
// an integer value as its digits.
func luaNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// toLua converts a reply to Lua as Redis does.
func toLua(L *lua.LState, r any) lua.LValue {
	switch v := r.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case Status:
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(string(v)))
		return t
	case errReply:
		t := L.CreateTable(0, 1)
		t.RawSetString("err", lua.LString(string(v)))
		return t
	case []any:
		t := L.CreateTable(len(v), 0)
		for i, x := range v {
			t.RawSetInt(i+1, toLua(L, x))
		}
		return t
	}
	return lua.LFalse
}

// fromLua converts a script's return value to a reply as Redis does:
// numbers truncate to integers, a table is an array up to its first nil
// (or a status / error table), false is nil, true is 1.
func fromLua(v lua.LValue) any {
	switch x := v.(type) {
	case lua.LString:
		return string(x)
	case lua.LNumber:
		return int64(float64(x))
	case lua.LBool:
		if x {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if ok, isStr := x.RawGetString("ok").(lua.LString); isStr {
			return Status(string(ok))
		}
		if e, isStr := x.RawGetString("err").(lua.LString); isStr {
			return errReply(string(e))
		}
		out := make([]any, 0, x.Len())
		for i := 1; ; i++ {
			el := x.RawGetInt(i)
			if el == lua.LNil {
				break
			}
			if t, isTable := el.(*lua.LTable); isTable {
				out = append(out, fromLua(t))
				continue
			}
			out = append(out, fromLua(el))
		}
		return out
	}
	return nil
}

// openCJSON adds the cjson module Redis gives scripts (encode, decode),
// with encoding/json.
func openCJSON(L *lua.LState) {
	mod := L.NewTable()
	L.SetField(mod, "encode", L.NewFunction(func(L *lua.LState) int {
		b, err := json.Marshal(luaToJSON(L.CheckAny(1), 0))
		if err != nil {
			L.RaiseError("Cannot serialise: %v", err)
			return 0
		}
		L.Push(lua.LString(b))
		return 1
	}))
	L.SetField(mod, "decode", L.NewFunction(func(L *lua.LState) int {
		var v any
		dec := json.NewDecoder(strings.NewReader(L.CheckString(1)))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			L.RaiseError("Expected value but found invalid token: %v", err)
			return 0
		}
		L.Push(jsonToLua(L, v))
		return 1
	}))
	L.SetGlobal("cjson", mod)
}

// luaToJSON converts a Lua value for encoding: a table with elements 1..n
// and nothing else is an array, any other an object.
func luaToJSON(v lua.LValue, depth int) any {
	if depth > 100 {
		return nil
	}
	switch x := v.(type) {
	case lua.LString:
		return string(x)
	case lua.LNumber:
		f := float64(x)
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f)
		}
		return f
	case lua.LBool:
		return bool(x)
	case *lua.LTable:
		n := x.Len()
		total := 0
		x.ForEach(func(lua.LValue, lua.LValue) { total++ })
		if n > 0 && n == total {
			arr := make([]any, n)
			for i := 1; i <= n; i++ {
				arr[i-1] = luaToJSON(x.RawGetInt(i), depth+1)
			}
			return arr
		}
		obj := map[string]any{}
		x.ForEach(func(k, val lua.LValue) { obj[k.String()] = luaToJSON(val, depth+1) })
		return obj
	}
	return nil
}

func jsonToLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case string:
		return lua.LString(x)
	case json.Number:
		f, _ := x.Float64()
		return lua.LNumber(f)
	case bool:
		return lua.LBool(x)
	case []any:
		t := L.CreateTable(len(x), 0)
		for i, e := range x {
			t.RawSetInt(i+1, jsonToLua(L, e))
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, e := range x {
			t.RawSetString(k, jsonToLua(L, e))
		}
		return t
	}
	return lua.LNil
}
