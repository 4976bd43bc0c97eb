package devservers

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	luajson "github.com/alicebob/miniredis/v2/gopher-json"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// The store runs EVAL and EVALSHA itself. miniredis builds a new Lua state
// for every call (its libraries, cjson, the redis module: about 1,700
// allocations), which made an opening cost ~0.3 ms of CPU and, with 200,000
// keys live, 3-4 times that in garbage collection. Here each script is
// compiled once and keeps one state (commands run one at a time under the
// store's lock, so one state per script is enough); KEYS and ARGV are set
// per call. redis.call dispatches on the store's script connection, whose
// commands pass the hook as a script's inner calls do (journaled, relative
// expiries made absolute, TTL from the real clock). Semantics follow
// miniredis's (and Redis's): conversions both ways, strict globals,
// redis.call raising and redis.pcall returning {err=...}.

type script struct {
	sha   string
	src   string
	proto *lua.FunctionProto
	l     *lua.LState // nil until first run
	ro    bool        // the state was built read-only
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

func compileScript(src string) (*lua.FunctionProto, error) {
	chunk, err := parse.Parse(strings.NewReader(src), "user_script")
	if err != nil {
		return nil, err
	}
	return lua.Compile(chunk, "user_script")
}

// loadScript compiles src into the cache (and miniredis's, for an EVALSHA
// queued in MULTI, which miniredis runs).
func (s *store) loadScript(src string) (*script, error) {
	sha := sha1Hex(src)
	if sc := s.scripts[sha]; sc != nil {
		return sc, nil
	}
	proto, err := compileScript(src)
	if err != nil {
		return nil, err
	}
	sc := &script{sha: sha, src: src, proto: proto}
	s.scripts[sha] = sc
	if _, err := s.call(0, "SCRIPT", "LOAD", src); err != nil {
		s.log.Warn("embedded redis: miniredis refused a script the store compiled", "sha", sha, "err", err)
	}
	return sc, nil
}

// scripting runs EVAL, EVALSHA, their _RO forms and SCRIPT for a client
// (outside MULTI: there miniredis queues and runs them).
func (s *store) scripting(c *server.Peer, cmd string, args []string) {
	switch cmd {
	case "SCRIPT":
		s.scriptCmd(c, args)
		return
	}
	if len(args) < 2 {
		c.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(cmd)))
		return
	}
	var sc *script
	switch cmd {
	case "EVAL", "EVAL_RO":
		var err error
		if sc, err = s.loadScript(args[0]); err != nil {
			c.WriteError(fmt.Sprintf("ERR Error compiling script (new function): %v", err))
			return
		}
	default:
		if sc = s.scripts[strings.ToLower(args[0])]; sc == nil {
			c.WriteError("NOSCRIPT No matching script. Please use EVAL.")
			return
		}
	}
	n, err := strconv.Atoi(args[1])
	switch {
	case err != nil:
		c.WriteError("ERR value is not an integer or out of range")
		return
	case n < 0:
		c.WriteError("ERR Number of keys can't be negative")
		return
	case n > len(args)-2:
		c.WriteError("ERR Number of keys can't be greater than number of args")
		return
	}
	s.runScript(c, sc, args[2:2+n], args[2+n:], strings.HasSuffix(cmd, "_RO"))
}

func (s *store) scriptCmd(c *server.Peer, args []string) {
	if len(args) == 0 {
		c.WriteError("ERR wrong number of arguments for 'script' command")
		return
	}
	switch strings.ToUpper(args[0]) {
	case "LOAD":
		if len(args) != 2 {
			c.WriteError("ERR unknown subcommand or wrong number of arguments for 'LOAD'. Try SCRIPT HELP.")
			return
		}
		sc, err := s.loadScript(args[1])
		if err != nil {
			c.WriteError(fmt.Sprintf("ERR Error compiling script (new function): %v", err))
			return
		}
		c.WriteBulk(sc.sha)
	case "EXISTS":
		if len(args) < 2 {
			c.WriteError("ERR wrong number of arguments for 'script|exists' command")
			return
		}
		c.WriteLen(len(args) - 1)
		for _, sha := range args[1:] {
			if s.scripts[strings.ToLower(sha)] != nil {
				c.WriteInt(1)
			} else {
				c.WriteInt(0)
			}
		}
	case "FLUSH":
		for _, sc := range s.scripts {
			if sc.l != nil {
				sc.l.Close()
			}
		}
		clear(s.scripts)
		_, _ = s.call(0, "SCRIPT", "FLUSH")
		c.WriteOK()
	default:
		s.run(c, "SCRIPT", args) // miniredis's answer
	}
}

// runScript runs sc with keys and argv on the script connection and writes
// its result to c.
func (s *store) runScript(c *server.Peer, sc *script, keys, argv []string, readOnly bool) {
	if sc.l == nil || sc.ro != readOnly {
		if sc.l != nil {
			sc.l.Close()
		}
		sc.l, sc.ro = s.newLuaState(readOnly), readOnly
	}
	l := sc.l
	if s.sdb != s.curDB {
		s.running.Store(s.scriptPeer)
		s.srv.Dispatch(s.scriptPeer, []string{"SELECT", strconv.Itoa(s.curDB)})
		s.running.Store(nil)
		s.sbuf.Reset()
		s.sdb = s.curDB
	}
	kt := l.CreateTable(len(keys), 0)
	for i, k := range keys {
		kt.RawSetInt(i+1, lua.LString(k))
	}
	at := l.CreateTable(len(argv), 0)
	for i, a := range argv {
		at.RawSetInt(i+1, lua.LString(a))
	}
	l.G.Global.RawSetString("KEYS", kt)
	l.G.Global.RawSetString("ARGV", at)
	l.SetTop(0)
	l.Push(l.NewFunctionFromProto(sc.proto))
	if err := l.PCall(0, 1, nil); err != nil {
		l.SetTop(0)
		msg := err.Error()
		if ae, ok := err.(*lua.ApiError); ok && ae.Object != nil {
			if t, ok := ae.Object.(*lua.LTable); ok && t.RawGetString("err").Type() == lua.LTString {
				// redis.call's error (or error(redis.error_reply(...))).
				msg, _, _ = strings.Cut(t.RawGetString("err").String(), "\n")
				c.WriteError(msg + " script: " + sc.sha)
				return
			}
			msg = ae.Object.String() // without the stack trace
		}
		msg, _, _ = strings.Cut(msg, "\n") // one line: it is a RESP error
		c.WriteError(fmt.Sprintf("ERR Error running script (call to f_%s): %s", sc.sha, strings.TrimSpace(msg)))
		return
	}
	luaToRESP(l, c, l.Get(1))
	l.SetTop(0)
}

// newLuaState builds a script's state: the libraries miniredis opens, cjson,
// the redis module, and globals that may not be created.
func (s *store) newLuaState(readOnly bool) *lua.LState {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.CoroutineLibName, lua.OpenCoroutine},
		{lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath},
		{lua.DebugLibName, lua.OpenDebug},
	} {
		l.Push(l.NewFunction(lib.fn))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	luajson.Preload(l)
	if err := l.DoString(`cjson = require("json")`); err != nil {
		panic(err) // the library is compiled in
	}
	redisMod := l.NewTable()
	for name, fn := range s.redisFuncs(readOnly) {
		redisMod.RawSetString(name, l.NewFunction(fn))
	}
	for name, v := range map[string]lua.LValue{"LOG_DEBUG": lua.LNumber(0), "LOG_VERBOSE": lua.LNumber(1),
		"LOG_NOTICE": lua.LNumber(2), "LOG_WARNING": lua.LNumber(3)} {
		redisMod.RawSetString(name, v)
	}
	l.SetGlobal("redis", redisMod)
	l.SetGlobal("server", redisMod)
	// As Redis: a script may not create globals (it would leak into the
	// next call of the same script, whose state is kept here).
	if err := l.DoString(`
local mt = {}
setmetatable(_G, mt)
mt.__newindex = function(t, n, v)
  if n == "KEYS" or n == "ARGV" then rawset(t, n, v) return end
  error("Script attempted to create global variable '" .. tostring(n) .. "'", 2)
end
mt.__index = function(t, n)
  error("Script attempted to access nonexistent global variable '" .. tostring(n) .. "'", 2)
end`); err != nil {
		panic(err)
	}
	return l
}

func (s *store) redisFuncs(readOnly bool) map[string]lua.LGFunction {
	call := func(raise bool) lua.LGFunction {
		return func(l *lua.LState) int {
			top := l.GetTop()
			if top == 0 {
				l.RaiseError("Please specify at least one argument for this redis lib call")
				return 0
			}
			args := make([]string, 0, top)
			for i := 1; i <= top; i++ {
				switch a := l.Get(i).(type) {
				case lua.LNumber:
					args = append(args, a.String())
				case lua.LString:
					args = append(args, string(a))
				default:
					l.RaiseError("Lua redis lib command arguments must be strings or integers")
					return 0
				}
			}
			cmd := strings.ToUpper(args[0])
			var reply any
			var err error
			if readOnly && s.srv.IsRegisteredCommand(cmd) && !s.srv.IsReadOnlyCommand(cmd) {
				err = fmt.Errorf("ERR Write commands are not allowed from read-only scripts")
			} else {
				reply, err = s.scriptCall(args)
			}
			if err != nil {
				if raise {
					// As Redis 7: the command's error is the script's.
					t := l.NewTable()
					t.RawSetString("err", lua.LString(err.Error()))
					l.Error(t, 1)
					return 0
				}
				t := l.NewTable()
				t.RawSetString("err", lua.LString(err.Error()))
				l.Push(t)
				return 1
			}
			l.Push(respToLua(l, reply))
			return 1
		}
	}
	return map[string]lua.LGFunction{
		"call":  call(true),
		"pcall": call(false),
		"error_reply": func(l *lua.LState) int {
			msg, ok := l.Get(1).(lua.LString)
			if !ok {
				l.RaiseError("wrong number or type of arguments")
				return 0
			}
			m := strings.TrimPrefix(string(msg), "-")
			if !strings.Contains(m, " ") {
				m = "ERR " + m
			}
			t := l.NewTable()
			t.RawSetString("err", lua.LString(m))
			l.Push(t)
			return 1
		},
		"status_reply": func(l *lua.LState) int {
			msg, ok := l.Get(1).(lua.LString)
			if !ok {
				l.RaiseError("wrong number or type of arguments")
				return 0
			}
			t := l.NewTable()
			t.RawSetString("ok", msg)
			l.Push(t)
			return 1
		},
		"sha1hex": func(l *lua.LState) int {
			if l.GetTop() != 1 {
				l.RaiseError("wrong number of arguments")
				return 0
			}
			l.Push(lua.LString(sha1Hex(lua.LVAsString(l.Get(1)))))
			return 1
		},
		"log":                func(*lua.LState) int { return 0 },
		"replicate_commands": func(l *lua.LState) int { l.Push(lua.LTrue); return 1 },
		"set_repl":           func(*lua.LState) int { return 0 },
	}
}

// scriptCall runs one redis.call on the script connection.
func (s *store) scriptCall(args []string) (any, error) {
	s.sbuf.Reset()
	s.srv.Dispatch(s.scriptPeer, args)
	if err := s.sw.Flush(); err != nil {
		return nil, err
	}
	s.sr.Reset(s.sbuf)
	v, err := server.ParseReply(s.sr)
	if err != nil {
		return nil, err
	}
	if e, ok := v.(error); ok {
		return nil, e
	}
	return v, nil
}

// respToLua converts a reply for Lua, as Redis does for RESP2: nil is
// false, a status is {ok=...}.
func respToLua(l *lua.LState, v any) lua.LValue {
	switch r := v.(type) {
	case nil:
		return lua.LFalse
	case int:
		return lua.LNumber(r)
	case int64:
		return lua.LNumber(r)
	case []byte:
		return lua.LString(r)
	case string:
		return lua.LString(r)
	case server.Simple:
		t := l.NewTable()
		t.RawSetString("ok", lua.LString(r))
		return t
	case []any:
		t := l.CreateTable(len(r), 0)
		for i, e := range r {
			t.RawSetInt(i+1, respToLua(l, e))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}

// luaToRESP writes a script's result as Redis does: numbers truncated to
// integers, true 1, false and nil a null, {err=} an error, {ok=} a status,
// an array up to its first nil.
func luaToRESP(l *lua.LState, c *server.Peer, v lua.LValue) {
	switch t := v.(type) {
	case lua.LBool:
		if t {
			c.WriteInt(1)
		} else {
			c.WriteNull()
		}
	case lua.LNumber:
		c.WriteInt(int(t))
	case lua.LString:
		c.WriteBulk(string(t))
	case *lua.LTable:
		if e := t.RawGetString("err"); e.Type() != lua.LTNil {
			c.WriteError(e.String())
			return
		}
		if ok := t.RawGetString("ok"); ok.Type() != lua.LTNil {
			c.WriteInline(ok.String())
			return
		}
		var items []lua.LValue
		for i := 1; ; i++ {
			e := t.RawGetInt(i)
			if e.Type() == lua.LTNil {
				break
			}
			items = append(items, e)
		}
		c.WriteLen(len(items))
		for _, e := range items {
			luaToRESP(l, c, e)
		}
	default:
		c.WriteNull()
	}
}

// bufPeer is a connection of the store's own whose replies go to a buffer.
func bufPeer() (*server.Peer, *bytes.Buffer, *bufio.Writer) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	return server.NewPeer(w), &b, w
}
