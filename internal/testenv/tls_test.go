package testenv_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// TestCerts: the server certificate verifies for the loopback names against
// the CA (and against nothing else), the client certificate for client auth.
func TestCerts(t *testing.T) {
	t.Parallel()
	c := testenv.NewCerts(t)
	other := testenv.NewCerts(t)
	server, _ := x509.ParseCertificate(c.Server.Certificate[0])
	client, _ := x509.ParseCertificate(c.Client.Certificate[0])
	for _, name := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := server.Verify(x509.VerifyOptions{DNSName: name, Roots: c.CA}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: c.CA}); err == nil {
		t.Error("server certificate verifies for example.com")
	}
	if _, err := server.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: other.CA}); err == nil {
		t.Error("server certificate verifies against another CA")
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: c.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
}

func TestRedisTLSAndACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.NewCerts(t)
	tlsSrv := testenv.NewRedisTLS(t, c)
	if !strings.HasPrefix(tlsSrv.URL, "rediss://127.0.0.1:") {
		t.Errorf("URL %s", tlsSrv.URL)
	}
	ping := func(o *redis.Options) error {
		o.DisableIdentity, o.MaxRetries, o.DialTimeout = true, -1, time.Second
		cl := redis.NewClient(o)
		defer cl.Close()
		return cl.Ping(ctx).Err()
	}
	withCert := c.ClientTLS()
	withCert.Certificates = []tls.Certificate{c.Client}
	for name, cfg := range map[string]*tls.Config{"CA": c.ClientTLS(), "CA and client certificate": withCert} {
		if err := ping(&redis.Options{Addr: tlsSrv.Addr, TLSConfig: cfg}); err != nil {
			t.Errorf("TLS with %s: %v", name, err)
		}
	}
	if err := ping(&redis.Options{Addr: tlsSrv.Addr, TLSConfig: testenv.NewCerts(t).ClientTLS()}); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("TLS trusting another CA: %v", err)
	}
	if err := ping(&redis.Options{Addr: tlsSrv.Addr}); err == nil {
		t.Error("plain TCP to the TLS port answered")
	}

	acl := testenv.NewRedisACL(t, "coalesce on >s3cret ~* &* +@all", "default off")
	if err := ping(&redis.Options{Addr: acl.Addr, Username: "coalesce", Password: "s3cret"}); err != nil {
		t.Errorf("right credentials: %v", err)
	}
	if err := ping(&redis.Options{Addr: acl.Addr, Username: "coalesce", Password: "wrong"}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("wrong password: %v", err)
	}
	if err := ping(&redis.Options{Addr: acl.Addr}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no credentials: %v", err)
	}
}

func TestNATSTLS(t *testing.T) {
	t.Parallel()
	c := testenv.NewCerts(t)
	srv := testenv.NATSTLS(t, c, false, "u", "p")
	if !strings.HasPrefix(srv.URL, "tls://127.0.0.1:") {
		t.Errorf("URL %s", srv.URL)
	}
	nc, js := srv.Connect(t, nats.Secure(c.ClientTLS()), nats.UserInfo("u", "p"))
	if _, err := js.AccountInfo(context.Background()); err != nil || !nc.TLSRequired() {
		t.Fatalf("JetStream over TLS: %v (TLS required: %v)", err, nc.TLSRequired())
	}
	for name, opts := range map[string][]nats.Option{
		"wrong password": {nats.Secure(c.ClientTLS()), nats.UserInfo("u", "x")},
		"untrusted CA":   {nats.Secure(testenv.NewCerts(t).ClientTLS()), nats.UserInfo("u", "p")},
	} {
		if nc, err := nats.Connect(srv.URL, opts...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
}
