package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/redis/go-redis/v9"
)

// mustLoad loads a configuration that must be valid.
func mustLoad(t *testing.T, content string, env func(string) string) *Config {
	t.Helper()
	c, err := Load(writeConfig(t, content), env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRedisClientSingleNode(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("app", "secret")
	c := mustLoad(t, "redis:\n  url: redis://nobody:wrong@"+mr.Addr()+"/0\n  username: app\nnats: {urls: [n]}\n",
		envOf(map[string]string{"COALESCE_REDIS_PASSWORD": "secret"}))
	rdb, err := c.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	cl, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("RedisClient = %T, want *redis.Client", rdb)
	}
	if o := cl.Options(); !o.DisableIdentity || o.Username != "app" || o.Password != "secret" {
		t.Errorf("options: DisableIdentity %v, Username %q, Password %q", o.DisableIdentity, o.Username, o.Password)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestRedisClientKinds(t *testing.T) {
	t.Parallel()
	ca, _, _ := tlsFiles(t, t.TempDir())
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, rdb redis.UniversalClient)
	}{
		{"rediss with a CA", "redis:\n  url: rediss://cache.internal:6380/3\n  tls: {ca_file: " + ca + "}\n", func(t *testing.T, rdb redis.UniversalClient) {
			o := rdb.(*redis.Client).Options()
			if o.TLSConfig == nil || o.TLSConfig.ServerName != "cache.internal" || o.TLSConfig.RootCAs == nil || o.DB != 3 || !o.DisableIdentity {
				t.Errorf("options = %+v", o)
			}
		}},
		{"tls enabled on redis://", "redis:\n  url: redis://cache.internal\n  db: 4\n  tls: {enabled: true}\n", func(t *testing.T, rdb redis.UniversalClient) {
			o := rdb.(*redis.Client).Options()
			if o.TLSConfig == nil || o.TLSConfig.ServerName != "cache.internal" || o.DB != 4 {
				t.Errorf("options = %+v", o)
			}
		}},
		{"cluster", "redis:\n  addrs: ['r1:6379', 'r2:6379']\n  password: pw\n", func(t *testing.T, rdb redis.UniversalClient) {
			o := rdb.(*redis.ClusterClient).Options()
			if len(o.Addrs) != 2 || o.Password != "pw" || !o.DisableIdentity {
				t.Errorf("options = %+v", o)
			}
		}},
		{"sentinel", "redis:\n  sentinel: {master: mymaster, addrs: ['s1:26379']}\n  db: 2\n", func(t *testing.T, rdb redis.UniversalClient) {
			if _, ok := rdb.(*redis.Client); !ok {
				t.Errorf("RedisClient = %T, want the failover *redis.Client", rdb)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustLoad(t, tt.yaml+"nats: {urls: [n]}\n", noEnv)
			rdb, err := c.RedisClient()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Close() })
			tt.check(t, rdb)
		})
	}
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		c := mustLoad(t, "", noEnv)
		if _, err := c.RedisClient(); err == nil {
			t.Error("RedisClient in embedded mode: no error")
		}
	})
}

// natsOptions applies opts to nats' defaults.
func natsOptions(t *testing.T, opts []nats.Option) nats.Options {
	t.Helper()
	o := nats.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

func TestNATSOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, key := tlsFiles(t, dir)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()

	base := "redis: {url: 'redis://r'}\nnats:\n  urls: [nats://n:4222]\n"
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, o nats.Options)
	}{
		{"user and password", base + "  user: app\n  password: pw\n", func(t *testing.T, o nats.Options) {
			if o.User != "app" || o.Password != "pw" || o.Secure {
				t.Errorf("User %q Password %q Secure %v", o.User, o.Password, o.Secure)
			}
		}},
		{"token", base + "  token: tok\n", func(t *testing.T, o nats.Options) {
			if o.Token != "tok" {
				t.Errorf("Token %q", o.Token)
			}
		}},
		{"nkey", base + "  nkey_file: " + seedFile + "\n", func(t *testing.T, o nats.Options) {
			if o.Nkey != pub || o.SignatureCB == nil {
				t.Errorf("Nkey %q, SignatureCB set %v", o.Nkey, o.SignatureCB != nil)
			}
		}},
		{"creds", base + "  creds_file: " + seedFile + "\n", func(t *testing.T, o nats.Options) {
			if o.UserJWT == nil {
				t.Error("UserJWT not set")
			}
		}},
		{"tls", base + "  tls: {enabled: true, ca_file: " + ca + ", cert_file: " + cert + ", key_file: " + key + "}\n", func(t *testing.T, o nats.Options) {
			if !o.Secure || o.TLSConfig == nil || o.TLSConfig.RootCAs == nil || len(o.TLSConfig.Certificates) != 1 {
				t.Errorf("Secure %v TLSConfig %+v", o.Secure, o.TLSConfig)
			}
		}},
		{"tls by url", "redis: {url: 'redis://r'}\nnats:\n  urls: [tls://n:4222]\n  tls: {ca_file: " + ca + "}\n", func(t *testing.T, o nats.Options) {
			if !o.Secure || o.TLSConfig == nil || o.TLSConfig.RootCAs == nil {
				t.Errorf("Secure %v TLSConfig %+v", o.Secure, o.TLSConfig)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := mustLoad(t, tt.yaml, noEnv)
			o := natsOptions(t, c.NATSOptions())
			if o.Name != "coalesce" || o.MaxReconnect != -1 || o.ReconnectWait != 250*time.Millisecond {
				t.Errorf("Name %q MaxReconnect %d ReconnectWait %v", o.Name, o.MaxReconnect, o.ReconnectWait)
			}
			tt.check(t, o)
		})
	}
}

func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, cert, _ := tlsFiles(t, dir)
	var c Config
	for _, tt := range []struct {
		name string
		tls  TLS
		want string
	}{
		{"missing CA", TLS{CAFile: filepath.Join(dir, "none.pem")}, "config: tls ca_file: open "},
		{"cert without key", TLS{CertFile: cert}, "config: tls cert_file: cert_file and key_file go together"},
		{"key is a certificate", TLS{CertFile: cert, KeyFile: ca}, "config: tls cert_file: "},
	} {
		if _, err := c.TLSConfig(tt.tls); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: TLSConfig error = %v, want prefix %q", tt.name, err, tt.want)
		}
	}
	cfg, err := c.TLSConfig(TLS{})
	if err != nil || cfg.MinVersion == 0 {
		t.Errorf("TLSConfig(TLS{}) = %+v, %v", cfg, err)
	}
}
