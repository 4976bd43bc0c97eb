package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coalesce-io/coalesce/internal/testenv"
)

// clientsConfig is the policies the clients' own tests submit to.
const clientsConfig = `policies:
  recompute:
    mode: debounce
    window: 30s
    key_fields: [tenant_id]
  digest:
    mode: debounce
    window: 1s
    payload: accumulate
    key_fields: [user]
`

// clientDaemon is the built daemon on a real redis-server, with its
// in-process NATS (nats-server v2.15.2) on a free port.
type clientDaemon struct {
	base, redisURL, natsURL string
	serve                   *proc
}

func startClientDaemon(t *testing.T) clientDaemon {
	t.Helper()
	rs := testenv.NewRedis(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "coalesce.yaml")
	if err := os.WriteFile(cfgPath, []byte(clientsConfig+"embedded:\n  data_dir: "+filepath.Join(dir, "data")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr, natsAddr := freeAddr(t), freeAddr(t)
	d := clientDaemon{base: "http://" + httpAddr, redisURL: "redis://" + rs.Addr + "/0", natsURL: "nats://" + natsAddr}
	d.serve = start(t, "serve", "--config", cfgPath, "--redis", d.redisURL, "--http", httpAddr, "--nats-listen", natsAddr)
	waitHTTP(t, d.base+"/readyz", d.serve)
	return d
}

// TestPythonClient runs clients/python's unittest suite against the built
// daemon (real Redis, in-process NATS), the push-worker test included
// (coalesce work --post to the helper's server). Every test must run: none
// may be skipped here.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	py := python3(t)
	d := startClientDaemon(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-v", "-s", "tests")
	cmd.Dir = "../../clients/python"
	cmd.Env = append(os.Environ(), "COALESCE_URL="+d.base, "COALESCE_BIN="+binary(t),
		"COALESCE_REDIS="+d.redisURL, "COALESCE_NATS="+d.natsURL, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	s := string(out)
	if err != nil || !strings.Contains(s, "\nOK") || strings.Contains(s, "skipped") {
		t.Fatalf("python -m unittest: %v\n%s\nserve:\n%s", err, s, d.serve.out.String())
	}
	if m := regexp.MustCompile(`Ran (\d+) tests`).FindStringSubmatch(s); m == nil || m[1] == "0" {
		t.Fatalf("no Python test ran:\n%s", s)
	}
	t.Logf("%s", s[strings.LastIndex(s, "Ran "):])
}

// TestTypeScriptClient runs clients/typescript's tests (node --test) against
// the built daemon: the client's calls, the worker helper over NATS, and the
// checks that the generated types and dist/ are current. Every test must
// run: none may be skipped here.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	dir, _ := filepath.Abs("../../clients/typescript")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "typescript", "package.json"))
	}
	if err != nil {
		if os.Getenv("COALESCE_REQUIRE_SERVERS") != "" {
			t.Fatalf("node and clients/typescript's packages are required (npm ci --prefix clients/typescript): %v", err)
		}
		t.Skipf("no node or no clients/typescript/node_modules: %v", err)
	}
	d := startClientDaemon(t)
	cmd := exec.Command(node, "--test", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COALESCE_URL="+d.base, "COALESCE_NATS="+d.natsURL)
	out, err := cmd.CombinedOutput()
	s := string(out)
	if err != nil || !strings.Contains(s, "# fail 0") || !strings.Contains(s, "# skipped 0") || strings.Contains(s, "# pass 0") {
		t.Fatalf("node --test: %v\n%s\nserve:\n%s", err, s, d.serve.out.String())
	}
	t.Logf("%s", s[strings.LastIndex(s, "# tests"):])
}
