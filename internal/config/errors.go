package config

import (
	"errors"
	"strconv"
)

// ErrInvalid is matched (errors.Is) by every *Error: the configuration
// cannot be used.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is a configuration problem: where it is and what to change. Its text
// reads "file:line: key.path: message", or "VARIABLE: key.path: message"
// when the value came from the environment.
type Error struct {
	File string // configuration file, "" when none
	Line int    // 1-based line in File, 0 when unknown
	Env  string // environment variable the value came from, if it did
	Path string // key path, e.g. policies.recompute.window; "" for the whole file
	Msg  string
	Err  error // underlying cause, if any (e.g. a *debounce.PolicyError)
}

func (e *Error) Error() string {
	var b []byte
	switch {
	case e.Env != "":
		b = append(b, e.Env...)
	case e.File != "":
		b = append(b, e.File...)
		if e.Line > 0 {
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(e.Line), 10)
		}
	}
	if e.Path != "" {
		if len(b) > 0 {
			b = append(b, ": "...)
		}
		b = append(b, e.Path...)
	}
	if len(b) > 0 {
		b = append(b, ": "...)
	}
	return string(append(b, e.Msg...))
}

// Unwrap lets errors.Is match ErrInvalid and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}
