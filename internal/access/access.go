// Package access decides what an HTTP request to coalesce may do: bearer
// tokens that may act, read-only bearer tokens, and the dashboard's session
// cookie (signed with the token that signed in) with its CSRF token.
//
// Sessions are stateless: a cookie names its level, expiry and a random
// nonce, signed with an HMAC key derived from the token it was issued for.
// Every replica with the same tokens accepts it, and removing a token from
// the configuration ends its sessions. The CSRF token is derived from the
// session the same way, so a page of an earlier session (signed out, signed
// in again) holds a CSRF token that no longer matches.
package access

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Level is what a request may do.
type Level int

// Levels, each allowing what the one before allows.
const (
	None  Level = iota // nothing: no token, or a wrong one
	Read               // read everything, change nothing
	Write              // act: submit events, cancel rounds, replay dead letters
)

func (l Level) String() string {
	switch l {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "none"
}

// CookieName is the dashboard's session cookie.
const CookieName = "coalesce_session"

// CSRFHeader carries the CSRF token of a request authenticated by the
// session cookie that changes something.
const CSRFHeader = "X-CSRF-Token"

// SessionLifetime is how long a sign-in lasts.
const SessionLifetime = 12 * time.Hour

// Errors of Request.
var (
	// ErrCSRF: a request authenticated by the session cookie that changes
	// something came without the session's CSRF token, or with another
	// session's (a stale page).
	ErrCSRF = errors.New("access: missing or stale CSRF token")
)

// Tokens are the configured bearer tokens.
type Tokens struct {
	write, read []key
}

// key is a token as kept: its hash, to compare in constant time, and the
// HMAC key its sessions are signed with.
type key struct {
	sum  [sha256.Size]byte
	hmac []byte
}

func newKey(token string) key {
	k := key{sum: sha256.Sum256([]byte(token))}
	mac := sha256.Sum256([]byte("coalesce session\n" + token))
	k.hmac = mac[:]
	return k
}

// New keeps the tokens; blank ones are ignored (an empty token would let an
// empty Bearer in). With no write token everyone may act (Open).
func New(write, read []string) *Tokens {
	t := &Tokens{}
	for _, s := range write {
		if s = strings.TrimSpace(s); s != "" {
			t.write = append(t.write, newKey(s))
		}
	}
	for _, s := range read {
		if s = strings.TrimSpace(s); s != "" {
			t.read = append(t.read, newKey(s))
		}
	}
	return t
}

// Open reports whether no token is configured: every request may act.
func (t *Tokens) Open() bool { return len(t.write) == 0 }

// Token returns the level a bearer token grants.
func (t *Tokens) Token(token string) Level {
	if t.Open() {
		return Write
	}
	lvl, _ := t.find(token)
	return lvl
}

// find looks a token up in constant time over every configured token.
func (t *Tokens) find(token string) (Level, key) {
	if token == "" {
		return None, key{}
	}
	sum := sha256.Sum256([]byte(token))
	lvl, found := None, key{}
	for _, list := range []struct {
		keys []key
		lvl  Level
	}{{t.write, Write}, {t.read, Read}} {
		for _, k := range list.keys {
			if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 {
				lvl, found = list.lvl, k
			}
		}
	}
	return lvl, found
}

// Bearer returns the level of the request's Authorization header (None
// without one).
func (t *Tokens) Bearer(r *http.Request) Level {
	if t.Open() {
		return Write
	}
	auth := r.Header.Get("Authorization")
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "Bearer ") {
		return None
	}
	return t.Token(strings.TrimSpace(auth[7:]))
}

// Request returns what r may do: by its bearer token, else by its session
// cookie. A request authenticated by the cookie whose method changes
// something (not GET, HEAD or OPTIONS) must carry the session's CSRF token
// in CSRFHeader, else it gets None and ErrCSRF.
func (t *Tokens) Request(r *http.Request) (Level, error) {
	if t.Open() {
		return Write, nil
	}
	if r.Header.Get("Authorization") != "" {
		return t.Bearer(r), nil
	}
	s, ok := t.Session(r, time.Now())
	if !ok {
		return None, nil
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return s.Level, nil
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) != 1 {
		return None, ErrCSRF
	}
	return s.Level, nil
}

// Session is a signed-in browser's session.
type Session struct {
	Level   Level
	CSRF    string // the token its pages send with actions
	Expires time.Time
}

// SignIn checks token and, when it is a configured one, returns the session
// cookie to set (HttpOnly, SameSite=Strict, for path; Secure when secure)
// and its session.
func (t *Tokens) SignIn(token, path string, secure bool, now time.Time) (*http.Cookie, Session, bool) {
	lvl, k := t.find(strings.TrimSpace(token))
	if lvl == None {
		return nil, Session{}, false
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	exp := now.Add(SessionLifetime)
	body := "v1." + lvl.String()[:1] + "." + strconv.FormatInt(exp.Unix(), 10) + "." + hex.EncodeToString(nonce[:])
	value := body + "." + sign(k, body)
	c := &http.Cookie{Name: CookieName, Value: value, Path: path, Expires: exp, MaxAge: int(SessionLifetime / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure}
	return c, Session{Level: lvl, CSRF: csrf(k, body), Expires: exp}, true
}

// SignOut returns the cookie that removes the session from the browser. (A
// copy of the cookie stays valid until it expires: sessions are stateless;
// remove the token from the configuration to end them all.)
func SignOut(path string, secure bool) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: "", Path: path, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure}
}

// Session reads r's session cookie; ok is false without a valid, unexpired
// one.
func (t *Tokens) Session(r *http.Request, now time.Time) (Session, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return Session{}, false
	}
	return t.verify(c.Value, now)
}

func (t *Tokens) verify(value string, now time.Time) (Session, bool) {
	i := strings.LastIndexByte(value, '.')
	if i < 0 {
		return Session{}, false
	}
	body, mac := value[:i], value[i+1:]
	parts := strings.Split(body, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return Session{}, false
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !now.Before(time.Unix(exp, 0)) {
		return Session{}, false
	}
	var keys []key
	lvl := None
	switch parts[1] {
	case "w":
		keys, lvl = t.write, Write
	case "r":
		keys, lvl = t.read, Read
	default:
		return Session{}, false
	}
	for _, k := range keys {
		if hmac.Equal([]byte(mac), []byte(sign(k, body))) {
			return Session{Level: lvl, CSRF: csrf(k, body), Expires: time.Unix(exp, 0)}, true
		}
	}
	return Session{}, false
}

func sign(k key, body string) string {
	h := hmac.New(sha256.New, k.hmac)
	h.Write([]byte("cookie\n" + body))
	return hex.EncodeToString(h.Sum(nil))
}

func csrf(k key, body string) string {
	h := hmac.New(sha256.New, k.hmac)
	h.Write([]byte("csrf\n" + body))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
