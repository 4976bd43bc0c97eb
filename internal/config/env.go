package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// EnvVar is an environment variable Load reads over the file.
type EnvVar struct {
	Name        string
	Description string
}

// envOverride is an EnvVar and the key it sets.
type envOverride struct {
	EnvVar
	path  string
	apply func(c *Config, v string)
}

// envOverrides are the environment overrides, in the order they are
// applied. They keep secrets and deployment addresses out of the file.
func envOverrides() []envOverride {
	return []envOverride{
		{EnvVar{"COALESCE_REDIS_URL", "Redis URL (redis://, rediss:// or unix://) of a single node; replaces redis.url, redis.addrs and redis.sentinel"},
			"redis.url", func(c *Config, v string) { c.Redis.URL, c.Redis.Addrs, c.Redis.SentinelMaster = v, nil, "" }},
		{EnvVar{"COALESCE_REDIS_ADDRS", "comma-separated Redis Cluster seeds (or sentinels, with redis.sentinel.master); replaces redis.addrs and redis.url"},
			"redis.addrs", func(c *Config, v string) { c.Redis.Addrs, c.Redis.URL = splitList(v), "" }},
		{EnvVar{"COALESCE_REDIS_USERNAME", "Redis ACL user; replaces redis.username"},
			"redis.username", func(c *Config, v string) { c.Redis.Username = v }},
		{EnvVar{"COALESCE_REDIS_PASSWORD", "Redis password; replaces redis.password"},
			"redis.password", func(c *Config, v string) { c.Redis.Password = v }},
		{EnvVar{"COALESCE_NATS_URL", "comma-separated NATS server URLs; replaces nats.url/nats.urls"},
			"nats.urls", func(c *Config, v string) { c.NATS.URLs = splitList(v) }},
		{EnvVar{"COALESCE_NATS_CREDS", "NATS user credentials file (.creds); replaces nats.creds_file"},
			"nats.creds_file", func(c *Config, v string) { c.NATS.CredsFile = v }},
		{EnvVar{"COALESCE_NATS_NKEY", "NATS nkey seed file; replaces nats.nkey_file"},
			"nats.nkey_file", func(c *Config, v string) { c.NATS.NKeyFile = v }},
		{EnvVar{"COALESCE_NATS_USER", "NATS user; replaces nats.user"},
			"nats.user", func(c *Config, v string) { c.NATS.User = v }},
		{EnvVar{"COALESCE_NATS_PASSWORD", "NATS password; replaces nats.password"},
			"nats.password", func(c *Config, v string) { c.NATS.Password = v }},
		{EnvVar{"COALESCE_NATS_TOKEN", "NATS token; replaces nats.token"},
			"nats.token", func(c *Config, v string) { c.NATS.Token = v }},
		{EnvVar{"COALESCE_HTTP_TOKENS", "comma-separated HTTP bearer tokens; replaces http.tokens"},
			"http.tokens", func(c *Config, v string) { c.HTTP.Tokens = splitList(v) }},
		{EnvVar{"COALESCE_HTTP_READ_TOKENS", "comma-separated read-only HTTP bearer tokens; replaces http.read_tokens"},
			"http.read_tokens", func(c *Config, v string) { c.HTTP.ReadTokens = splitList(v) }},
		{EnvVar{"COALESCE_OUTBOX_POSTGRES", "Postgres URL of the transactional outbox to relay; replaces outbox.postgres"},
			"outbox.postgres", func(c *Config, v string) { c.Outbox.Postgres = v }},
	}
}

// EnvVars lists the environment variables Load reads, for --help. A set,
// non-empty variable replaces the file's value. A NATS credential the
// environment sets also displaces the file's other ways to authenticate
// (COALESCE_NATS_TOKEN drops the file's creds_file, nkey_file, user and
// password; COALESCE_NATS_PASSWORD keeps the file's user).
//
//	COALESCE_REDIS_URL       Redis URL of a single node (replaces redis.url, redis.addrs and redis.sentinel)
//	COALESCE_REDIS_ADDRS     comma-separated Cluster seeds or sentinels (replaces redis.addrs and redis.url)
//	COALESCE_REDIS_USERNAME  redis.username
//	COALESCE_REDIS_PASSWORD  redis.password
//	COALESCE_NATS_URL        comma-separated NATS URLs (replaces nats.url/nats.urls)
//	COALESCE_NATS_CREDS      nats.creds_file
//	COALESCE_NATS_NKEY       nats.nkey_file
//	COALESCE_NATS_USER       nats.user
//	COALESCE_NATS_PASSWORD   nats.password
//	COALESCE_NATS_TOKEN      nats.token
//	COALESCE_HTTP_TOKENS     comma-separated http.tokens
//	COALESCE_HTTP_READ_TOKENS comma-separated http.read_tokens
//	COALESCE_OUTBOX_POSTGRES outbox.postgres
func EnvVars() []EnvVar {
	overrides := envOverrides()
	out := make([]EnvVar, len(overrides))
	for i, o := range overrides {
		out[i] = o.EnvVar
	}
	return out
}

// applyEnv sets the values the environment overrides and remembers which
// variable set each, for messages.
func (d *decoder) applyEnv(c *Config, env func(string) string) error {
	if u, a := env("COALESCE_REDIS_URL"), env("COALESCE_REDIS_ADDRS"); u != "" && a != "" {
		return &Error{Env: "COALESCE_REDIS_ADDRS", Msg: "COALESCE_REDIS_URL is set too; set one of them"}
	}
	// One way to authenticate to NATS: a method the environment sets
	// displaces the file's other methods (a password alone keeps the
	// file's user).
	n := &c.NATS
	type method struct {
		vars  []string
		clear func()
	}
	methods := []method{
		{[]string{"COALESCE_NATS_CREDS"}, func() { n.CredsFile = "" }},
		{[]string{"COALESCE_NATS_NKEY"}, func() { n.NKeyFile = "" }},
		{[]string{"COALESCE_NATS_USER", "COALESCE_NATS_PASSWORD"}, func() { n.User, n.Password = "", "" }},
		{[]string{"COALESCE_NATS_TOKEN"}, func() { n.Token = "" }},
	}
	inEnv := func(m method) bool {
		return slices.ContainsFunc(m.vars, func(name string) bool { return env(name) != "" })
	}
	if slices.ContainsFunc(methods, inEnv) {
		for _, m := range methods {
			if !inEnv(m) {
				m.clear()
			}
		}
	}
	before := *c
	for _, o := range envOverrides() {
		v := env(o.Name)
		if v == "" {
			continue
		}
		if err := checkEnvList(o, v); err != nil {
			return err
		}
		o.apply(c, v)
		d.env[o.path] = o.Name
		if label := env(SourceOf(o.Name)); label != "" {
			d.env[o.path] = label // a command-line flag, not the variable
		}
		switch o.path {
		case "redis.addrs":
			d.addrsPath = o.path
		case "nats.urls":
			d.urlsPath = o.path
		}
	}
	return checkDowngrade(&before, c, env)
}

// checkDowngrade refuses an override that would quietly connect with less
// protection than the file asked for: without the TLS a rediss:// or
// tls:// URL turned on, or without the password a replaced Redis URL
// carried. The file can still turn TLS off itself; the environment only
// replaces addresses.
func checkDowngrade(file, c *Config, env func(string) string) error {
	if name := redisVar(env); name != "" {
		fileURL, _ := url.Parse(file.Redis.URL)
		newURL, _ := url.Parse(c.Redis.URL)
		switch {
		case file.Redis.URL == "" || fileURL == nil:
		case fileURL.Scheme == "rediss" && !c.Redis.TLS.Enabled && (newURL == nil || newURL.Scheme != "rediss"):
			if name == "COALESCE_REDIS_ADDRS" {
				return &Error{Env: name, Msg: "replaces redis.url, a rediss:// URL, and would connect without TLS; set redis.tls.enabled: true in the file to keep it"}
			}
			return &Error{Env: name, Msg: "replaces redis.url, a rediss:// URL, and would connect without TLS; use a rediss:// URL, or set redis.tls.enabled: true in the file"}
		case name == "COALESCE_REDIS_ADDRS" && urlCredentials(fileURL) && c.Redis.Password == "" && c.Redis.Username == "":
			return &Error{Env: name, Msg: "replaces redis.url, which carries the credentials, and would connect without them; set COALESCE_REDIS_PASSWORD (and COALESCE_REDIS_USERNAME for an ACL user), or redis.password, too"}
		}
	}
	if env("COALESCE_NATS_URL") != "" && natsTLS(file.NATS.URLs) && !c.NATS.TLS.Enabled && !natsTLS(c.NATS.URLs) {
		return &Error{Env: "COALESCE_NATS_URL", Msg: "replaces nats.urls, tls:// or wss:// URLs, and would connect without TLS; use tls:// URLs, or set nats.tls.enabled: true in the file"}
	}
	return nil
}

// redisVar is the variable that replaced the Redis address, if any.
func redisVar(env func(string) string) string {
	for _, name := range []string{"COALESCE_REDIS_URL", "COALESCE_REDIS_ADDRS"} {
		if env(name) != "" {
			return name
		}
	}
	return ""
}

// urlCredentials reports whether a Redis URL carries a user or a password.
func urlCredentials(u *url.URL) bool {
	if u.User == nil {
		return false
	}
	p, _ := u.User.Password()
	return p != "" || u.User.Username() != ""
}

// natsTLS reports whether any of urls asks for TLS by its scheme.
func natsTLS(urls []string) bool {
	return slices.ContainsFunc(urls, func(u string) bool {
		scheme, _ := checkNATSURL(u)
		return scheme == "tls" || scheme == "wss"
	})
}

// envLists are the overrides whose value is a comma-separated list.
var envLists = []string{"redis.addrs", "nats.urls", "http.tokens"}

// checkEnvList refuses a list variable that is set but lists nothing, or
// has an empty item: dropping blanks would replace the file's list by a
// shorter or empty one (an empty http.tokens turns authentication off).
func checkEnvList(o envOverride, v string) error {
	if !slices.Contains(envLists, o.path) {
		return nil
	}
	if strings.TrimSpace(v) == "" {
		return &Error{Env: o.Name, Msg: fmt.Sprintf("is set but lists nothing; give comma-separated values, or unset it to keep %s", o.path)}
	}
	items := strings.Split(v, ",")
	for i, item := range items {
		if strings.TrimSpace(item) == "" {
			return &Error{Env: o.Name, Msg: fmt.Sprintf("item %d of %d is empty; give comma-separated values with none empty, or unset it to keep %s", i+1, len(items), o.path)}
		}
	}
	return nil
}

// SourceOf is the name a Load env function answers with the source of an
// override it gives for the variable name, when that is not the
// environment: a command line passing --redis as COALESCE_REDIS_URL
// answers SourceOf("COALESCE_REDIS_URL") with "--redis", and errors about
// the value then name the flag.
func SourceOf(name string) string { return "coalesce-source-of:" + name }
