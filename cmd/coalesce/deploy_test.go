package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSystemdUnit checks deploy/coalesce.service: systemd-analyze verify
// finds nothing to say about it (unknown keys, bad values, a missing binary),
// and its ExecStart command, pointed at a temporary folder and free ports,
// serves and stops on SIGTERM within TimeoutStopSec with exit status 0.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/coalesce.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	bin := binary(t)
	dir := t.TempDir()

	var execStart []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = strings.Fields(v)
		}
	}
	if len(execStart) < 2 || execStart[0] != "/usr/local/bin/coalesce" || execStart[1] != "serve" {
		t.Fatalf("ExecStart is not /usr/local/bin/coalesce serve …: %q", execStart)
	}

	t.Run("verify", func(t *testing.T) {
		t.Parallel()
		tool, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze not found (Debian package systemd): the unit is not verified here")
		}
		path := filepath.Join(t.TempDir(), "coalesce.service")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/coalesce", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(tool, "verify", path)
		out, err := cmd.CombinedOutput()
		var said []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "coalesce.service") || strings.Contains(l, bin) {
				said = append(said, l)
			}
		}
		if err != nil || len(said) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, strings.Join(said, "\n"))
		}
	})

	// The unit's own command line, its paths moved into dir and the
	// listeners onto free ports.
	cfg := filepath.Join(dir, "coalesce.yaml")
	example, err := os.ReadFile("../../examples/coalesce.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, example, 0o644); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range execStart[1:] {
		switch a {
		case "/etc/coalesce/coalesce.yaml":
			a = cfg
		case "/var/lib/coalesce":
			a = filepath.Join(dir, "state")
		}
		args = append(args, a)
	}
	httpAddr := freeAddr(t)
	args = append(args, "--http", httpAddr, "--nats-listen", freeAddr(t), "--redis-listen", freeAddr(t))
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	p := startCmd(t, cmd)
	waitHTTP(t, "http://"+httpAddr+"/readyz", p)
	stopBy := 30 * time.Second
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "TimeoutStopSec="); ok {
			if d, err := time.ParseDuration(v + "s"); err == nil {
				stopBy = d
			}
		}
	}
	start := time.Now()
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM; output:\n%s", code, p.out.String())
	}
	if took := time.Since(start); took > stopBy {
		t.Errorf("SIGTERM to exit took %v, over the unit's TimeoutStopSec %v (systemd would SIGKILL)", took, stopBy)
	}
	if !strings.Contains(p.out.String(), `"level":"INFO"`) {
		t.Errorf("--log-format json did not log JSON:\n%.2000s", p.out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err != nil {
		t.Errorf("the state directory holds no data: %v", err)
	}
}
