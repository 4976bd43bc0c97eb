package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/fingerprint"
)

// validate checks the decoded configuration and returns the first problem.
func (d *decoder) validate(c *Config) error {
	checks := []func(*Config) error{
		d.validateRedis,
		d.validateNATS,
		d.validateHTTP,
		d.validateEmbedded,
		d.validatePolicies,
		d.validateCron,
		d.validateWorker,
		d.validateLocal,
		d.validateOutbox,
	}
	for _, check := range checks {
		if err := check(c); err != nil {
			return err
		}
	}
	return nil
}

// item returns the path of a list element and registers it, so pathErr
// finds its line or the variable that set the list.
func (d *decoder) item(path string, i int) string {
	p := index(path, i)
	if _, ok := d.parents[p]; !ok {
		d.parents[p] = path
	}
	return p
}

func (d *decoder) validateRedis(c *Config) error {
	r := &c.Redis
	if r.URL != "" && len(r.Addrs) > 0 {
		return d.pathErr(d.addrsPath, nil, "redis.url is set too; use url for a single node, addrs for a Cluster or sentinel.addrs for Sentinel")
	}
	tlsOn := r.TLS.Enabled
	if r.URL != "" {
		o, err := redis.ParseURL(r.URL)
		if err != nil {
			// No cause attached: a *url.Error holds the URL, password and all.
			return d.pathErr("redis.url", nil, "not a Redis URL: %s (use e.g. redis://host:6379/0 or rediss://host:6380)", urlReason(err))
		}
		if r.SentinelMaster != "" {
			return d.pathErr("redis.sentinel.master", nil, "a Sentinel setup needs redis.sentinel.addrs, not redis.url")
		}
		if r.DB != 0 && o.DB != 0 && r.DB != o.DB {
			return d.pathErr("redis.db", nil, "%d differs from database %d in redis.url; set it in one place", r.DB, o.DB)
		}
		tlsOn = tlsOn || o.TLSConfig != nil
	}
	for i, a := range r.Addrs {
		if msg := checkHostPort(a, false, false); msg != "" {
			return d.pathErr(d.item(d.addrsPath, i), nil, "%s is not host:port: %s", quote(a), msg)
		}
	}
	switch {
	case r.SentinelMaster != "" && len(r.Addrs) == 0 && r.URL == "":
		return d.pathErr("redis.sentinel.addrs", nil, "required with sentinel.master: the sentinels' host:port addresses")
	case d.addrsPath == "redis.sentinel.addrs" && len(r.Addrs) > 0 && r.SentinelMaster == "":
		return d.pathErr("redis.sentinel.master", nil, "required with sentinel.addrs: the name the sentinels monitor the primary under")
	case r.SentinelMaster == "" && len(r.Addrs) > 0 && r.DB != 0:
		return d.pathErr("redis.db", nil, "Redis Cluster has only database 0; remove db")
	}
	switch {
	case r.Prefix == "":
		return d.pathErr("redis.prefix", nil, "must not be empty (the default is %q)", DefaultRedisPrefix)
	case strings.ContainsAny(r.Prefix, "{}*?[]\\"):
		return d.pathErr("redis.prefix", nil, "%s must not contain { } * ? [ ] or \\", quote(r.Prefix))
	case len(r.Prefix) > 64:
		return d.pathErr("redis.prefix", nil, "is longer than 64 bytes")
	}
	if r.Eviction != EvictionWarn && r.Eviction != EvictionRefuse {
		return d.pathErr("redis.eviction", nil, "%s is not %s or %s", quote(r.Eviction), EvictionWarn, EvictionRefuse)
	}
	if r.Persistence != EvictionWarn && r.Persistence != EvictionRefuse {
		return d.pathErr("redis.persistence", nil, "%s is not %s or %s", quote(r.Persistence), EvictionWarn, EvictionRefuse)
	}
	switch acks := r.Replicas.Acks; acks {
	case "", ReplicasAuto, ReplicasOff:
	default:
		if n, err := strconv.Atoi(acks); err != nil || n < 1 || n > 16 {
			return d.pathErr("redis.replicas.acks", nil, "%s is not %s, %s or a number of replicas from 1 to 16", quote(acks), ReplicasAuto, ReplicasOff)
		}
	}
	switch r.Schedules {
	case "", string(debounce.SchedulesRedis), string(debounce.SchedulesJetStream), "auto":
	default:
		return d.pathErr("redis.schedules", nil, "%s is not auto, redis or jetstream", quote(r.Schedules))
	}
	if r.Schedules == string(debounce.SchedulesRedis) && r.SentinelMaster == "" && len(r.Addrs) > 0 {
		return d.pathErr("redis.schedules", nil, "redis needs a single node or Sentinel: on a Cluster a type's due list cannot share a slot with its rounds; use auto or jetstream")
	}
	if t := r.Replicas.Timeout; t < 0 || t > 2*time.Second {
		return d.pathErr("redis.replicas.timeout", nil, "%v must be between 0 (the default, 500ms) and 2s (below the client's 3s read timeout)", t)
	}
	return d.checkTLS("redis.tls", r.TLS, tlsOn, "set redis.tls.enabled: true or use a rediss:// URL")
}

// urlReason is why a URL did not parse, without the URL (it may hold a
// password).
func urlReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
}

func (d *decoder) validateNATS(c *Config) error {
	n := &c.NATS
	tlsOn := n.TLS.Enabled
	for i, u := range n.URLs {
		p := d.item(d.urlsPath, i)
		if d.urlsPath == "nats.url" && len(n.URLs) == 1 {
			p = d.urlsPath
		}
		scheme, msg := checkNATSURL(u)
		if msg != "" {
			return d.pathErr(p, nil, "not a NATS URL: %s (use e.g. nats://host:4222 or tls://host:4222)", msg)
		}
		tlsOn = tlsOn || scheme == "tls" || scheme == "wss"
	}
	auth := []struct{ path, value string }{
		{"nats.creds_file", n.CredsFile},
		{"nats.nkey_file", n.NKeyFile},
		{"nats.user", n.User},
		{"nats.token", n.Token},
	}
	first := ""
	for _, a := range auth {
		if a.value == "" {
			continue
		}
		if first != "" {
			return d.pathErr(a.path, nil, "%s is set too; use one way to authenticate: creds_file, nkey_file, user and password, or token", first)
		}
		first = a.path
	}
	if n.Password != "" && n.User == "" {
		return d.pathErr("nats.password", nil, "needs nats.user")
	}
	if n.CredsFile != "" {
		if msg := checkFile(n.CredsFile); msg != "" {
			return d.pathErr("nats.creds_file", nil, "%s", msg)
		}
	}
	if n.NKeyFile != "" {
		if msg := checkFile(n.NKeyFile); msg != "" {
			return d.pathErr("nats.nkey_file", nil, "%s", msg)
		}
		if _, err := nats.NkeyOptionFromSeed(n.NKeyFile); err != nil {
			return d.pathErr("nats.nkey_file", err, "%s is not an nkey user seed file: %v", quote(n.NKeyFile), err)
		}
	}
	if err := d.checkTLS("nats.tls", n.TLS, tlsOn, "set nats.tls.enabled: true or use tls:// URLs"); err != nil {
		return err
	}
	for _, s := range []struct{ path, name string }{{"nats.stream", n.Stream}, {"nats.ingest.stream", n.Ingest.Stream}} {
		if s.name == "" || len(s.name) > 255 || strings.ContainsAny(s.name, ".*>/\\ \t\r\n") {
			return d.pathErr(s.path, nil, "%s must be 1-255 characters without . * > / \\ or whitespace", quote(s.name))
		}
	}
	if n.Ingest.Stream == n.Stream {
		return d.pathErr("nats.ingest.stream", nil, "%s is the job stream's name too; give the ingest stream its own", quote(n.Stream))
	}
	for tok := range strings.SplitSeq(n.Prefix, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return d.pathErr("nats.prefix", nil, "%s must be dot-separated subject tokens without empty tokens, wildcards (* >) or whitespace", quote(n.Prefix))
		}
	}
	if n.Replicas < 1 || n.Replicas > 5 {
		return d.pathErr("nats.replicas", nil, "%d must be 1 to 5", n.Replicas)
	}
	if n.Storage != StorageFile && n.Storage != StorageMemory {
		return d.pathErr("nats.storage", nil, "%s is not %s or %s", quote(n.Storage), StorageFile, StorageMemory)
	}
	if n.MaxAge < time.Minute || n.MaxAge > debounce.MaxMaxAge {
		return d.pathErr("nats.max_age", nil, "%v must be between 1m and %v: it is how long a job waits for a worker, and how long past its due time a round keeps its data", n.MaxAge, debounce.MaxMaxAge)
	}
	return nil
}

// checkNATSURL returns the scheme of a NATS server URL, or what is wrong
// with it. A bare host:port means nats://host:port, as in nats.go.
func checkNATSURL(s string) (scheme, msg string) {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", urlReason(err)
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return "", "the scheme " + quote(u.Scheme) + " is not nats, tls, ws or wss"
	}
	if u.Hostname() == "" {
		return "", "the host is missing"
	}
	if port := u.Port(); port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return "", "the port " + quote(port) + " is not a number from 1 to 65535"
		}
	}
	return u.Scheme, ""
}

// checkFile says what is wrong with a file the configuration names.
func checkFile(name string) string {
	fi, err := os.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return quote(name) + " does not exist"
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "cannot read " + quote(name) + ": " + err.Error()
	case !fi.Mode().IsRegular():
		return quote(name) + " is not a regular file"
	case fi.Size() > maxAuxFile:
		return quote(name) + " is larger than " + formatSize(maxAuxFile)
	}
	return ""
}

// checkTLS checks a TLS block: its files exist and load, and they are only
// set when TLS is on (howOn says how to turn it on).
func (d *decoder) checkTLS(path string, t TLS, on bool, howOn string) error {
	files := []struct{ key, name string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}}
	for _, f := range files {
		if f.name == "" {
			continue
		}
		if msg := checkFile(f.name); msg != "" {
			return d.pathErr(d.child(path, f.key), nil, "%s", msg)
		}
	}
	if !on {
		for _, f := range files {
			if f.name != "" {
				return d.pathErr(d.child(path, f.key), nil, "is set but TLS is off; %s", howOn)
			}
		}
		if t.InsecureSkipVerify {
			return d.pathErr(d.child(path, "insecure_skip_verify"), nil, "is set but TLS is off; %s", howOn)
		}
		return nil
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			return d.pathErr(d.child(path, "cert_file"), nil, "required with key_file")
		}
		return d.pathErr(d.child(path, "key_file"), nil, "required with cert_file")
	}
	if t.CAFile != "" {
		if _, err := loadCAs(t.CAFile); err != nil {
			return d.pathErr(d.child(path, "ca_file"), err, "%v", err)
		}
	}
	if t.CertFile != "" {
		if _, err := loadKeyPair(t.CertFile, t.KeyFile); err != nil {
			return d.pathErr(d.child(path, "cert_file"), err, "%v", err)
		}
	}
	return nil
}

func (d *decoder) validateHTTP(c *Config) error {
	h := &c.HTTP
	if msg := checkHostPort(h.Listen, true, true); msg != "" {
		return d.pathErr("http.listen", nil, "%s is not host:port (e.g. 127.0.0.1:8080 or :8080): %s", quote(h.Listen), msg)
	}
	write := map[string]bool{}
	for _, list := range []struct {
		key    string
		tokens []string
	}{{"http.tokens", h.Tokens}, {"http.read_tokens", h.ReadTokens}} {
		for i, t := range list.tokens {
			p := d.item(list.key, i)
			switch {
			case t == "":
				return d.pathErr(p, nil, "empty; remove it or give a token")
			case strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
				return d.pathErr(p, nil, "holds whitespace or control characters")
			case list.key == "http.read_tokens" && write[t]:
				return d.pathErr(p, nil, "is also in http.tokens; a token is either read-only or not")
			}
			if list.key == "http.tokens" {
				write[t] = true
			}
		}
	}
	if len(h.ReadTokens) > 0 && len(h.Tokens) == 0 {
		return d.pathErr("http.read_tokens", nil, "read-only tokens without http.tokens would leave the API open to anyone without a token; set http.tokens too")
	}
	switch h.UI {
	case UIAuto, UIOn, UIOff:
	default:
		return d.pathErr("http.ui", nil, "%s: use auto (the dashboard at /ui/ with the embedded servers only), on or off", quote(h.UI))
	}
	if h.BodyLimit <= 0 {
		return d.pathErr("http.body_limit", nil, "must be more than 0")
	}
	if h.BodyLimit > MaxBodyLimit {
		return d.pathErr("http.body_limit", nil, "%s is more than the %s limit", formatSize(h.BodyLimit), formatSize(MaxBodyLimit))
	}
	for _, t := range []struct {
		path string
		d    time.Duration
	}{{"http.read_timeout", h.ReadTimeout}, {"http.write_timeout", h.WriteTimeout}} {
		if t.d <= 0 {
			return d.pathErr(t.path, nil, "must be more than 0")
		}
	}
	return nil
}

func (d *decoder) validateEmbedded(c *Config) error {
	e := &c.Embedded
	for _, l := range []struct{ path, addr string }{{"embedded.nats_listen", e.NATSListen}, {"embedded.redis_listen", e.RedisListen}} {
		if msg := checkHostPort(l.addr, true, true); msg != "" {
			return d.pathErr(l.path, nil, "%s is not host:port (e.g. 127.0.0.1:4222): %s", quote(l.addr), msg)
		}
	}
	if e.DataDir == "" {
		return d.pathErr("embedded.data_dir", nil, "must not be empty (the default is %s)", DefaultDataDir)
	}
	return nil
}

func (d *decoder) validatePolicies(c *Config) error {
	for _, p := range c.Policies {
		err := p.WithDefaults().Validate()
		if err == nil {
			continue
		}
		base := d.child("policies", p.Type)
		var pe *debounce.PolicyError
		if !errors.As(err, &pe) {
			return d.pathErr(base, err, "%v", err)
		}
		if pe.Field == "type" {
			return d.pathErr(base, err, "not a valid job type: %s", pe.Msg)
		}
		return d.pathErr(d.child(base, pe.Field), err, "%s", pe.Msg)
	}
	return nil
}

func (d *decoder) validateCron(c *Config) error {
	parser := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	names := map[string]int{}
	for i, r := range c.Cron {
		base := d.item("cron", i)
		if r.Name == "" {
			return d.pathErr(d.child(base, "name"), nil, "required: a name for the rule, unique among the rules")
		}
		if j, dup := names[r.Name]; dup {
			return d.pathErr(d.child(base, "name"), nil, "%s is already the name of cron[%d]", quote(r.Name), j)
		}
		names[r.Name] = i
		if err := checkSchedule(parser, r.Schedule); err != nil {
			return d.pathErr(d.child(base, "schedule"), err, "%v", err)
		}
		if _, err := time.LoadLocation(r.Timezone); err != nil {
			return d.pathErr(d.child(base, "timezone"), err, "%s is not a time zone (use an IANA name such as Europe/Paris, or UTC)", quote(r.Timezone))
		}
		if r.Type == "" {
			return d.pathErr(d.child(base, "type"), nil, "required: the job type the rule submits events for")
		}
		j := slices.IndexFunc(c.Policies, func(p debounce.Policy) bool { return p.Type == r.Type })
		if j < 0 {
			return d.pathErr(d.child(base, "type"), nil, "no policy for job type %s; add it under policies", quote(r.Type))
		}
		if err := d.checkArgs(base, r.Args, c.Policies[j]); err != nil {
			return err
		}
		if r.Key != "" && (len(r.Key) > debounce.MaxExplicitKeyLen || !utf8.ValidString(r.Key)) {
			return d.pathErr(d.child(base, "key"), nil, "must be 1-%d bytes of UTF-8", debounce.MaxExplicitKeyLen)
		}
	}
	return nil
}

// checkSchedule parses a cron spec. The parser panics on some malformed
// TZ= prefixes, so those are refused first and any other panic is caught.
func checkSchedule(parser cron.Parser, spec string) (err error) {
	const hint = `use 6 fields with seconds first, e.g. "0 */5 * * * *", or a descriptor such as "@every 1m"`
	trimmed := strings.TrimSpace(spec)
	switch {
	case trimmed == "":
		return fmt.Errorf("required: when to submit (%s)", hint)
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return errors.New("put the time zone in timezone, not in the schedule")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s is not a cron schedule (%s)", quote(spec), hint)
		}
	}()
	if _, err := parser.Parse(spec); err != nil {
		return fmt.Errorf("%s is not a cron schedule: %v (%s)", quote(spec), err, hint)
	}
	return nil
}

// checkArgs refuses cron args the policy would refuse at every tick.
func (d *decoder) checkArgs(base string, args json.RawMessage, p debounce.Policy) error {
	argsPath := d.child(base, "args")
	scheme, err := fingerprint.NewScheme(p.Type, p.KeyFields...)
	if err == nil {
		_, err = scheme.FromJSON(args)
	}
	if err != nil {
		var fe *fingerprint.Error
		if errors.As(err, &fe) && strings.HasPrefix(fe.Path, "args") {
			p := base + "." + fe.Path
			d.parents[p] = argsPath
			return d.pathErr(p, err, "%s", fe.Msg)
		}
		return d.pathErr(argsPath, err, "%v", err)
	}
	if p.ItemField != "" {
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) != nil || obj[p.ItemField] == nil {
			return d.pathErr(argsPath, nil, "has no member %s, the policy's item_field", quote(p.ItemField))
		}
	}
	return nil
}

func (d *decoder) validateLocal(c *Config) error {
	l := &c.Local
	switch l.Mode {
	case debounce.LocalJoinsAuto, "auto", debounce.LocalJoinsOff:
	default:
		return d.pathErr("local_joins.mode", nil, "%s is not a mode; use auto or off", quote(string(l.Mode)))
	}
	if l.FlushInterval < 0 || l.FlushInterval > time.Second {
		return d.pathErr("local_joins.flush_interval", nil, "%v is outside 1ms to 1s", l.FlushInterval)
	}
	if l.ClockSkew < 0 || l.ClockSkew > time.Minute {
		return d.pathErr("local_joins.clock_skew", nil, "%v is outside 1ms to 1m", l.ClockSkew)
	}
	if l.MaxRounds < 0 {
		return d.pathErr("local_joins.max_rounds", nil, "must not be negative")
	}
	return nil
}

func (d *decoder) validateWorker(c *Config) error {
	w := &c.Worker
	if w.AckWait != 0 && w.AckWait < 300*time.Millisecond {
		return d.pathErr("worker.ack_wait", nil, "%v is shorter than 300ms", w.AckWait)
	}
	for i, b := range w.Backoff {
		if b <= 0 {
			return d.pathErr(d.item("worker.backoff", i), nil, "must be more than 0")
		}
	}
	return nil
}

func (d *decoder) validateOutbox(c *Config) error {
	o := &c.Outbox
	if o.Postgres != "" {
		u := o.Postgres
		isURL := strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
		if !isURL && !strings.Contains(u, "=") {
			return d.pathErr("outbox.postgres", nil, "is neither a postgres:// URL nor a key=value connection string (use e.g. postgres://user:password@host:5432/db)")
		}
		if isURL {
			if _, err := url.Parse(u); err != nil {
				return d.pathErr("outbox.postgres", nil, "is not a valid URL (use e.g. postgres://user:password@host:5432/db; escape special characters of the password with %%XX)")
			}
		}
	}
	switch {
	case o.BatchSize < 0 || o.BatchSize > 100_000:
		return d.pathErr("outbox.batch_size", nil, "%d must be between 1 and 100000 (0 or unset: the default, 500)", o.BatchSize)
	case o.Concurrency < 0 || o.Concurrency > 10_000:
		return d.pathErr("outbox.concurrency", nil, "%d must be between 1 and 10000 (0 or unset: the default, 64)", o.Concurrency)
	case o.PollEvery < 0 || (o.PollEvery > 0 && o.PollEvery < 10*time.Millisecond):
		return d.pathErr("outbox.poll_every", nil, "%v must be at least 10ms (unset: 1s)", o.PollEvery)
	}
	return nil
}
