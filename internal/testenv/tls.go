package testenv

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Certs is a throwaway PKI for one test: an ECDSA CA, a server certificate
// for the loopback (127.0.0.1, ::1 and localhost) and a client certificate,
// all signed by the CA and written as PEM files in a directory of the test.
type Certs struct {
	Dir            string
	CAFile         string // the CA certificate
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string

	CA     *x509.CertPool // holds the CA certificate
	Server tls.Certificate
	Client tls.Certificate
}

// NewCerts generates a CA and its server and client certificates, valid
// from an hour ago for a day.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c, err := newCerts(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: certificates: %v", err)
	}
	return c
}

func newCerts(dir string) (*Certs, error) {
	c := &Certs{Dir: dir, CA: x509.NewCertPool()}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "coalesce test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	c.CA.AddCert(caCert)
	c.CAFile = filepath.Join(dir, "ca.pem")
	if err := writePEM(c.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, loopback bool) (tls.Certificate, string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, "", "", err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if loopback {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, "", "", err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return tls.Certificate{}, "", "", err
		}
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, "", "", err
		}
		if err := writePEM(keyFile, "EC PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, "", "", err
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		return cert, certFile, keyFile, err
	}
	if c.Server, c.ServerCertFile, c.ServerKeyFile, err = leaf(2, "server", x509.ExtKeyUsageServerAuth, true); err != nil {
		return nil, err
	}
	if c.Client, c.ClientCertFile, c.ClientKeyFile, err = leaf(3, "client", x509.ExtKeyUsageClientAuth, false); err != nil {
		return nil, err
	}
	return c, nil
}

func writePEM(name, kind string, der []byte) error {
	return os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// ServerTLS returns a server configuration with the server certificate that
// verifies a client certificate against the CA when one is presented.
func (c *Certs) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{c.Server},
		ClientCAs:    c.CA,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
}

// ClientTLS returns a client configuration that trusts the CA, without a
// client certificate.
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.CA}
}

// NewRedisACL starts a private redis-server whose users are the given ACL
// rules, one `user` directive each, e.g. "coalesce on >s3cret ~* &* +@all"
// and "default off"; it is stopped when the test ends. Stop it only with the
// test: Start would bring it back without the users.
func NewRedisACL(t testing.TB, users ...string) *RedisServer {
	t.Helper()
	var extra []string
	for _, u := range users {
		extra = append(extra, "--user")
		extra = append(extra, strings.Fields(u)...)
	}
	return startRedisCustom(t, nil, func(port string) []string {
		return append([]string{"--port", port}, extra...)
	})
}

// NewRedisTLS starts a private redis-server that listens for TLS only, with
// the server certificate of c and client certificates optional (verified
// against the CA when given); its URL is rediss://127.0.0.1:port/0. It is
// stopped when the test ends; do not Start it again.
func NewRedisTLS(t testing.TB, c *Certs) *RedisServer {
	t.Helper()
	s := startRedisCustom(t, c.ClientTLS(), func(port string) []string {
		return []string{"--port", "0", "--tls-port", port,
			"--tls-cert-file", c.ServerCertFile, "--tls-key-file", c.ServerKeyFile,
			"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", "optional"}
	})
	s.URL = "rediss://" + s.Addr + "/0"
	return s
}

// startRedisCustom starts redis-server with args(port) on a free loopback
// port, and waits until it answers PING (with any reply: an ACL server
// answers NOAUTH), over TLS when tlsCfg is set.
func startRedisCustom(t testing.TB, tlsCfg *tls.Config, args func(port string) []string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOrFail(t, "redis-server is not on PATH: install it (apt-get install -y redis-server)")
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(p)
		logFile := filepath.Join(dir, "redis-"+port+".log")
		cmd := exec.Command("redis-server", append(args(port),
			"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--logfile", logFile)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		addr := net.JoinHostPort("127.0.0.1", port)
		if lastErr = waitRedisReply(addr, tlsCfg, 5*time.Second); lastErr == nil {
			s := &RedisServer{Addr: addr, URL: "redis://" + addr + "/0", cmd: cmd}
			t.Cleanup(s.Stop)
			return s
		}
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		log, _ := os.ReadFile(logFile)
		lastErr = fmt.Errorf("redis-server on %s: %w; log: %s", addr, lastErr, lastLines(string(log), 5))
	}
	t.Fatalf("testenv: %v", lastErr)
	return nil
}

// waitRedisReply sends PING until the server replies with a RESP status or
// error line.
func waitRedisReply(addr string, tlsCfg *tls.Config, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := pingRaw(addr, tlsCfg)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering PING: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pingRaw(addr string, tlsCfg *tls.Config) error {
	d := &net.Dialer{Timeout: 200 * time.Millisecond}
	var conn net.Conn
	var err error
	if tlsCfg != nil {
		conn, err = tls.DialWithDialer(d, "tcp", addr, tlsCfg)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+") && !strings.HasPrefix(line, "-") {
		return errors.New("unexpected reply " + strconv.Quote(line))
	}
	return nil
}

// NATSTLS starts an embedded nats-server with JetStream that requires TLS
// (the server certificate of c; a client certificate too when verifyClients)
// and, when user is not empty, that user and password; it is shut down when
// the test ends. Its URL is tls://127.0.0.1:port.
func NATSTLS(t testing.TB, c *Certs, verifyClients bool, user, password string) *NATSServer {
	t.Helper()
	cfg := c.ServerTLS()
	if verifyClients {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s := &NATSServer{
		Dir: t.TempDir(),
		opts: &server.Options{
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			NoLog:      true,
			NoSigs:     true,
			TLS:        true,
			TLSVerify:  verifyClients,
			TLSConfig:  cfg,
			TLSTimeout: 2,
			Username:   user,
			Password:   password,
		},
	}
	return s.launch(t, "embedded nats-server with TLS")
}
