package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// natsReconnectWait is the pause between reconnect attempts to NATS.
const natsReconnectWait = 250 * time.Millisecond

// TLSConfig builds the client TLS configuration of t (TLS 1.2 or later,
// the CA file's roots instead of the system's, the client certificate),
// whether or not t.Enabled: the caller decides that TLS is on.
func (c *Config) TLSConfig(t TLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pool, err := loadCAs(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("config: tls ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := loadKeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: tls cert_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// readAux reads a file named by the configuration, up to maxAuxFile.
func readAux(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAuxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAuxFile {
		return nil, fmt.Errorf("%s is larger than %s", quote(name), formatSize(maxAuxFile))
	}
	return b, nil
}

func loadCAs(name string) (*x509.CertPool, error) {
	pem, err := readAux(name)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", quote(name))
	}
	return pool, nil
}

func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, errors.New("cert_file and key_file go together")
	}
	certPEM, err := readAux(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readAux(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s with %s: %w", quote(certFile), quote(keyFile), err)
	}
	return cert, nil
}

// RedisClient returns a client for the configured Redis: a single node from
// URL (with Username, Password, DB and TLS over the URL's), a Sentinel
// failover client from SentinelMaster and Addrs, or a Cluster client from
// Addrs. CLIENT SETINFO is disabled (DisableIdentity) for Redis 7.0 and
// miniredis. In embedded mode there is nothing to connect to and it fails.
//
// The clients never resend a command whose reply was lost (MaxRetries -1):
// the scripts that open rounds are not idempotent, and one resent after the
// round it opened was published, run and closed would open it again under
// the same token, a round that would never run.
func (c *Config) RedisClient() (redis.UniversalClient, error) {
	r := &c.Redis
	var tlsCfg *tls.Config
	if r.TLS.Enabled {
		cfg, err := c.TLSConfig(r.TLS)
		if err != nil {
			return nil, err
		}
		tlsCfg = cfg
	}
	switch {
	case r.URL != "":
		o, err := redis.ParseURL(r.URL)
		if err != nil {
			return nil, fmt.Errorf("config: redis.url: %s", urlReason(err))
		}
		if r.Username != "" {
			o.Username = r.Username
		}
		if r.Password != "" {
			o.Password = r.Password
		}
		if r.DB != 0 {
			o.DB = r.DB
		}
		if o.TLSConfig != nil && tlsCfg == nil { // rediss:// without a tls block
			cfg, err := c.TLSConfig(r.TLS)
			if err != nil {
				return nil, err
			}
			tlsCfg = cfg
		}
		if tlsCfg != nil {
			if o.TLSConfig != nil {
				tlsCfg.InsecureSkipVerify = tlsCfg.InsecureSkipVerify || o.TLSConfig.InsecureSkipVerify // ?skip_verify=true
			}
			if u, err := url.Parse(r.URL); err == nil && tlsCfg.ServerName == "" {
				tlsCfg.ServerName = u.Hostname()
			}
			o.TLSConfig = tlsCfg
		}
		o.DisableIdentity = true
		o.MaxRetries = -1 // never resend: see RedisClient
		return redis.NewClient(o), nil
	case r.SentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:      r.SentinelMaster,
			SentinelAddrs:   r.Addrs,
			Username:        r.Username,
			Password:        r.Password,
			DB:              r.DB,
			TLSConfig:       tlsCfg,
			DisableIdentity: true,
			MaxRetries:      -1, // never resend: see RedisClient
		}), nil
	case len(r.Addrs) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:           r.Addrs,
			Username:        r.Username,
			Password:        r.Password,
			TLSConfig:       tlsCfg,
			DisableIdentity: true,
			MaxRetries:      -1, // never resend: see RedisClient
		}), nil
	}
	return nil, errors.New("config: redis is not configured (embedded mode: use the embedded server's address)")
}

// NATSOptions returns the connection options of the configured NATS:
// name "coalesce", reconnecting forever every 250ms, the credentials
// (creds file, nkey seed file, user and password, or token) and TLS. Files
// are read when connecting, so their errors come from nats.Connect. The
// servers are not among them:
//
//	nc, err := nats.Connect(strings.Join(cfg.NATS.URLs, ","), cfg.NATSOptions()...)
func (c *Config) NATSOptions() []nats.Option {
	n := &c.NATS
	opts := []nats.Option{
		nats.Name("coalesce"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
	}
	switch {
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	case n.NKeyFile != "":
		seed := n.NKeyFile
		opts = append(opts, func(o *nats.Options) error {
			opt, err := nats.NkeyOptionFromSeed(seed)
			if err != nil {
				return fmt.Errorf("config: nats.nkey_file: %w", err)
			}
			return opt(o)
		})
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	}
	if c.natsTLS() {
		t := n.TLS
		opts = append(opts, func(o *nats.Options) error {
			cfg, err := c.TLSConfig(t)
			if err != nil {
				return err
			}
			o.Secure, o.TLSConfig = true, cfg
			return nil
		})
	}
	return opts
}

// natsTLS reports whether the NATS connection uses TLS: enabled, or a
// tls:// or wss:// server URL.
func (c *Config) natsTLS() bool {
	if c.NATS.TLS.Enabled {
		return true
	}
	for _, u := range c.NATS.URLs {
		if scheme, _ := checkNATSURL(u); scheme == "tls" || scheme == "wss" {
			return true
		}
	}
	return false
}
