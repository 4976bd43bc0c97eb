// Package redact hides the secrets of the URLs and connection strings that
// coalesce logs or puts in error messages: one helper, used wherever such a
// string leaves the process.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces each secret.
const Mask = "xxxxx"

// URL returns raw with its secrets replaced by Mask:
//
//   - the password of its user info (scheme://user:PASSWORD@host), and a
//     user alone where it is a token (nats://TOKEN@host, https://TOKEN@host);
//   - the value of every query parameter whose name says it is a secret:
//     password, sslpassword, passwd, pwd, secret, client_secret, token,
//     access_token, api_key, auth, signature, credentials and the like
//     (Postgres and the Redis and NATS clients read several from the
//     query string: postgres://host/db?password=…);
//   - in a Postgres keyword/value connection string (host=db password=…),
//     the value of every such keyword.
//
// A string that is none of these is returned as it is, unless it fails to
// parse as a URL: then it says so, without repeating it.
func URL(raw string) string {
	if !strings.Contains(raw, "://") {
		if strings.Contains(raw, "=") {
			return keywords(raw)
		}
		if at := strings.LastIndexByte(raw, '@'); at >= 0 {
			// user:password@host:port without a scheme (NATS takes it),
			// or token@host:port (NATS's token).
			if c := strings.IndexByte(raw[:at], ':'); c >= 0 {
				return raw[:c+1] + Mask + raw[at:]
			}
			return Mask + raw[at:]
		}
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), Mask)
	} else if u.User != nil && tokenInUser(u.Scheme) {
		u.User = url.User(Mask)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = "(unparsable query)"
		} else {
			for k, vs := range q {
				if Secret(k) {
					for i := range vs {
						vs[i] = Mask
					}
				}
			}
			u.RawQuery = q.Encode()
		}
	}
	if u.Fragment != "" {
		u.Fragment = Mask // never anything a server needs
	}
	return u.String()
}

// tokenInUser reports a scheme whose user info without a password is a
// secret: NATS reads nats://TOKEN@host as its token, and an HTTP user alone
// is usually a token too (https://TOKEN@host). Redis and Postgres take a
// user name there.
func tokenInUser(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "nats", "tls", "ws", "wss", "http", "https":
		return true
	}
	return false
}

// URLs is URL of each, joined with commas (NATS's server list).
func URLs(raws []string) string {
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = URL(r)
	}
	return strings.Join(out, ",")
}

// Error redacts the URL a *url.Error in err's chain names (net/http's
// client errors quote the whole URL, query included), in place, and
// returns err.
func Error(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = URL(ue.URL)
	}
	return err
}

// secretWords are parts of parameter names that carry secrets.
var secretWords = []string{"pass", "pwd", "secret", "token", "apikey", "api_key", "api-key", "auth", "signature", "sig", "cred", "private"}

// Secret reports whether a query parameter or keyword of that name holds a
// secret.
func Secret(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// keyword=value pairs of a Postgres connection string; a value is bare or
// single-quoted with backslash escapes.
var keywordRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']*)`)

func keywords(raw string) string {
	return keywordRE.ReplaceAllStringFunc(raw, func(m string) string {
		sub := keywordRE.FindStringSubmatch(m)
		if !Secret(sub[1]) {
			return m
		}
		return sub[1] + sub[2] + Mask
	})
}
