package main

// The documentation as a user meets it: every link resolves, and the
// README's commands print what the README shows.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/coalesce-io/coalesce/internal/config"
)

const repoRoot = "../.."

// docFiles are the pages whose links are checked: the README and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, files...)
}

var (
	fenceRe   = regexp.MustCompile("(?ms)^```.*?^```[ \t]*$")
	codeRe    = regexp.MustCompile("`[^`\n]*`")
	linkRe    = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	headingRe = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
)

// proseOf is a Markdown page without its fenced code blocks, and with inline
// code spans emptied (a link inside either is not a link).
func proseOf(md string) string {
	md = fenceRe.ReplaceAllStringFunc(md, func(s string) string { return strings.Repeat("\n", strings.Count(s, "\n")) })
	return codeRe.ReplaceAllString(md, "``")
}

// anchors are the fragment ids GitHub gives a page's headings: lowercased,
// punctuation dropped, spaces to hyphens, repeats suffixed -1, -2, ….
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRe.FindAllStringSubmatch(fenceRe.ReplaceAllString(md, ""), -1) {
		text := linkRe.ReplaceAllString(m[1], "$1") // [label](url) reads as its label
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func TestAnchorsAsGitHubMakesThem(t *testing.T) {
	t.Parallel()
	got := anchors("# Title\n## What if: `coalesce simulate`\n```\n# not a heading\n```\n## The embedded default's store (issue 23, 2026-12-02)\n## 2. Start\n## Start\n## Start\n### A [link](x.md) here\n")
	for _, want := range []string{"title", "what-if-coalesce-simulate", "the-embedded-defaults-store-issue-23-2026-12-02", "2-start", "start", "start-1", "a-link-here"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block made an anchor")
	}
}

// TestDocLinks: every relative link and image of README.md and docs/*.md
// names a file or folder of the repository, and every #fragment a heading of
// its page. Links to other sites are not fetched.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	pages := map[string]string{}
	read := func(path string) (string, bool) {
		if s, ok := pages[path]; ok {
			return s, true
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		pages[path] = string(raw)
		return string(raw), true
	}
	links := 0
	for _, page := range docFiles(t) {
		md, _ := read(page)
		rel, _ := filepath.Rel(repoRoot, page)
		for _, m := range linkRe.FindAllStringSubmatch(proseOf(md), -1) {
			target := m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: no such file (%s)", rel, target, filepath.Clean(file))
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %q: a fragment on a file that is not Markdown", rel, target)
				continue
			}
			if s, _ := read(file); !anchors(s)[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", rel, target, filepath.Base(file), frag)
			}
		}
	}
	if links < 50 {
		t.Fatalf("only %d links found: the link pattern reads nothing", links)
	}
	t.Logf("%d links in %d pages", links, len(docFiles(t)))
}

// TestReadmeFrontPage: the README stays a front page (issue 29: at most 250
// lines) whose map names every page of docs/.
func TestReadmeFrontPage(t *testing.T) {
	t.Parallel()
	readme := string(mustRead(t, filepath.Join(repoRoot, "README.md")))
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; a front page has at most 250: move the detail into docs/", n)
	}
	for _, page := range docFiles(t)[1:] {
		name := filepath.Base(page)
		if !strings.Contains(readme, "](docs/"+name+")") {
			t.Errorf("the README's map of the docs does not link docs/%s", name)
		}
	}
}

// codeBlock is the first fenced block of the given language after heading
// in the Markdown file.
func codeBlock(t *testing.T, md, heading, lang string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no heading %q", heading)
	}
	rest := md[i:]
	open := "\n```" + lang + "\n"
	j := strings.Index(rest, open)
	if j < 0 {
		t.Fatalf("no ```%s block after %q", lang, heading)
	}
	body := rest[j+len(open):]
	k := strings.Index(body, "\n```\n")
	if k < 0 {
		t.Fatalf("the ```%s block after %q does not end", lang, heading)
	}
	return body[:k+1]
}

// tourStep is one command of a shell block and the lines the doc shows it
// printing (the "# " lines right after it).
type tourStep struct {
	command string
	want    []string
}

// tourSteps splits a shell block into commands (with their continuation
// lines) and the output each is shown to print. A comment after a blank line
// explains the next command; comments right after a command are its output.
func tourSteps(block string) []tourStep {
	var steps []tourStep
	inCommand, afterCommand := false, false
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			inCommand, afterCommand = false, false
		case inCommand:
			steps[len(steps)-1].command += "\n" + line
			inCommand = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "#"):
			if afterCommand {
				steps[len(steps)-1].want = append(steps[len(steps)-1].want, strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
			}
		default:
			steps = append(steps, tourStep{command: line})
			inCommand, afterCommand = strings.HasSuffix(line, `\`), true
		}
	}
	return steps
}

// shows reports whether out prints the lines want, in order (other lines
// may come between), each whole, "…" standing for any text.
func shows(out string, want []string) bool {
	lines := strings.Split(out, "\n")
	for _, w := range want {
		parts := strings.Split(w, "…")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		found := false
		for len(lines) > 0 && !found {
			found = re.MatchString(strings.TrimRight(lines[0], "\r"))
			lines = lines[1:]
		}
		if !found {
			return false
		}
	}
	return true
}

func TestShows(t *testing.T) {
	t.Parallel()
	out := "HELP x\n{\"a\":1,\"round\":\"00ab\",\"b\":2}\nnoise\nlast 3\n"
	for _, c := range []struct {
		want []string
		ok   bool
	}{
		{[]string{`{"a":1,"round":"…","b":2}`, "last 3"}, true},
		{[]string{`{"a":1,…}`}, true},
		{[]string{"last 3", `{"a":1,…}`}, false}, // out of order
		{[]string{`{"a":1,"round":"…","b":3}`}, false},
		{[]string{"last"}, false}, // whole lines only
	} {
		if got := shows(out, c.want); got != c.ok {
			t.Errorf("shows(%q) = %v", c.want, got)
		}
	}
}

// TestReadmeTour runs the README's set-up command and its tour as written
// (curl and the built binary for `go run ./cmd/coalesce`), the daemon on
// free ports with its data in a temporary folder, and checks that each
// command prints the lines the README shows after it.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("COALESCE_REQUIRE_SERVERS") != "" {
			t.Fatal("curl is required to run the README's tour: apt-get install curl")
		}
		t.Skip("no curl: the README's tour uses it")
	}
	readme := string(mustRead(t, filepath.Join(repoRoot, "README.md")))
	bin := binary(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "examples", "coalesce.yaml"), mustRead(t, filepath.Join(repoRoot, "examples", "coalesce.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}

	// Set up: the first command of the block, run as written in dir, on
	// free ports instead of 8080, 4222 and 6379.
	setup := tourSteps(codeBlock(t, readme, "## Set up", "sh"))
	if len(setup) != 2 || !strings.HasPrefix(setup[0].command, "go run ./cmd/coalesce serve ") || setup[1].command != "scripts/test" {
		t.Fatalf("Set up is not the two commands (serve, scripts/test): %+v", setup)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "scripts", "test")); err != nil {
		t.Fatalf("the README's test command: %v", err)
	}
	httpAddr := freeAddr(t)
	serveArgs := append(strings.Fields(strings.TrimPrefix(setup[0].command, "go run ./cmd/coalesce ")),
		"--http", httpAddr, "--nats-listen", freeAddr(t), "--redis-listen", freeAddr(t))
	serveCmd := exec.Command(bin, serveArgs...)
	serveCmd.Dir = dir
	serve := startCmd(t, serveCmd)
	waitHTTP(t, "http://"+httpAddr+"/readyz", serve)
	if _, err := os.Stat(filepath.Join(dir, "coalesce-data", "servers.json")); err != nil {
		t.Fatalf("serve did not put its data in ./coalesce-data: %v\n%s", err, serve.out.String())
	}

	steps := tourSteps(codeBlock(t, readme, "## A 60-second tour", "sh"))
	if len(steps) < 6 {
		t.Fatalf("the tour has %d commands: %+v", len(steps), steps)
	}
	env := append(os.Environ(), "COALESCE_SERVER=http://"+httpAddr)
	for _, step := range steps {
		if len(step.want) == 0 {
			t.Errorf("the tour shows no output for %q", step.command)
			continue
		}
		command := strings.ReplaceAll(step.command, "localhost:8080", httpAddr)
		command = strings.ReplaceAll(command, "go run ./cmd/coalesce ", bin+" ")
		if !strings.HasPrefix(step.command, "curl ") && !strings.HasPrefix(step.command, "printf ") && !strings.HasPrefix(step.command, "go run ./cmd/coalesce ") {
			t.Fatalf("the tour runs %q, which this test does not know how to run", step.command)
		}
		// A worker runs until stopped: read its output until it shows the
		// lines, then stop it as the reader would (Ctrl-C).
		long := strings.Contains(step.command, " work ")
		cmd := exec.Command("sh", "-c", command)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		group := -cmd.Process.Pid // sh and what it started: Ctrl-C reaches them all
		t.Cleanup(func() { _ = syscall.Kill(group, syscall.SIGKILL) })
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		exited := false
		deadline := time.After(time.Minute)
	wait:
		for !long || !shows(stdout.String(), step.want) {
			select {
			case err = <-done:
				exited = true
				break wait
			case <-deadline:
				break wait
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !exited {
			_ = syscall.Kill(group, syscall.SIGINT)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(group, syscall.SIGKILL)
				<-done
			}
			if !long {
				err = fmt.Errorf("still running after a minute")
			}
		}
		if !long && err != nil {
			t.Errorf("%s: %v\n%s%s", step.command, err, stdout.String(), stderr.String())
			continue
		}
		if !shows(stdout.String(), step.want) {
			t.Errorf("%s\nprints:\n%s\nwhere the README shows:\n%s\n(stderr: %s)", step.command, stdout.String(), strings.Join(step.want, "\n"), stderr.String())
		}
	}
	if code := serve.stop(t); code != 0 {
		t.Errorf("serve exit %d after SIGTERM:\n%s", code, serve.out.String())
	}
}

// TestReadmeGoExample builds the README's "In Go" program in a module of its
// own (the repository as a replaced dependency, nothing else of it), runs it
// against `coalesce serve`'s embedded servers on free ports, and checks that
// it prints what the README says.
func TestReadmeGoExample(t *testing.T) {
	t.Parallel()
	readme := string(mustRead(t, filepath.Join(repoRoot, "README.md")))
	program := codeBlock(t, readme, "## In Go", "go")
	i := strings.Index(readme, program)
	printsBlock := readme[i+len(program):]
	j := strings.Index(printsBlock, "It prints:\n\n```\n")
	if j < 0 {
		t.Fatal(`the README's Go program is not followed by "It prints:" and a block`)
	}
	prints := printsBlock[j+len("It prints:\n\n```\n"):]
	prints = prints[:strings.Index(prints, "```")]

	d := serveEmbedded(t, "# no policies: the program brings its own\n")
	mod := t.TempDir()
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// The program as copied, pointed at this test's servers.
	src := strings.ReplaceAll(program, `"127.0.0.1:6379"`, `"`+d.redisAddr+`"`)
	src = strings.ReplaceAll(src, `"nats://127.0.0.1:4222"`, `"nats://`+d.natsAddr+`"`)
	if src == program || strings.Count(src, d.redisAddr)+strings.Count(src, d.natsAddr) != 2 {
		t.Fatal("the README's Go program does not connect to 127.0.0.1:6379 and nats://127.0.0.1:4222, the embedded servers")
	}
	goMod := mustRead(t, filepath.Join(repoRoot, "go.mod"))
	requires := string(goMod[bytes.Index(goMod, []byte("\nrequire")):])
	files := map[string]string{
		"main.go": src,
		"go.mod":  "module example.com/readme\n\ngo 1.26.0\n\nrequire github.com/coalesce-io/coalesce v0.0.0\n\nreplace github.com/coalesce-io/coalesce => " + abs + "\n" + requires,
		"go.sum":  string(mustRead(t, filepath.Join(repoRoot, "go.sum"))),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", "readme-example", ".")
	build.Dir = mod
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go program does not build in a module of its own: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, filepath.Join(mod, "readme-example"))
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the README's Go program: %v\n%s%s\nserve:\n%s", err, stdout.String(), stderr.String(), d.serve.out.String())
	}
	if stdout.String() != prints {
		t.Errorf("the README's Go program printed:\n%s\nwhere the README shows:\n%s", stdout.String(), prints)
	}
}

// TestPythonPushHandlerExample runs examples/python-push-handler as its
// documentation says, behind `coalesce work --post` with a bearer token and
// a signing secret: the job reaches it and it prints what it covers; a
// request without the token is refused.
func TestPythonPushHandlerExample(t *testing.T) {
	t.Parallel()
	py := python3(t)
	d := serveEmbedded(t, `policies:
  recompute_financials:
    mode: debounce
    window: 1s
    key_fields: [tenant_id]
`)
	secrets := []string{"COALESCE_POST_TOKEN=tok-ex-1", "COALESCE_POST_SECRET=sig-ex-1"}
	hcmd := exec.Command(py, filepath.Join(repoRoot, "examples", "python-push-handler", "handler.py"), "--listen", "127.0.0.1:0")
	hcmd.Env = append(os.Environ(), secrets...)
	handler := startCmd(t, hcmd)
	url := ""
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if line, ok := strings.CutPrefix(strings.SplitN(handler.out.String(), "\n", 2)[0], "listening on "); ok && strings.Contains(handler.out.String(), "\n") {
			url = strings.TrimSpace(line)
		}
	}
	if url == "" {
		t.Fatalf("the handler did not say where it listens: %q", handler.out.String())
	}

	// A request without the token: 401, and nothing run.
	code, out, _ := runBinEnv(t, nil, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-d", `{"id":"x","type":"t","args":{}}`, url)
	if code == 0 && strings.TrimSpace(out) != "401" {
		t.Errorf("an unsigned request without the token: %s, want 401", out)
	}

	wcmd := exec.Command(binary(t), "work", "--config", d.cfgPath, "--redis", "redis://"+d.redisAddr+"/0", "--nats", "nats://"+d.natsAddr,
		"--type", "recompute_financials", "--post", url)
	wcmd.Env = append(os.Environ(), secrets...)
	work := startCmd(t, wcmd)
	for _, order := range []string{"1001", "1002"} {
		if code, _, stderr := runBin(t, "", "submit", "--server", d.base, "--type", "recompute_financials", "--args", `{"tenant_id":42,"order_id":`+order+`}`); code != 0 {
			t.Fatalf("submit: %s", stderr)
		}
	}
	want := regexp.MustCompile(`(?m)^recompute_financials \{"order_id": 1001, "tenant_id": 42\}: 2 events \(job [0-9a-f]{64}\.[0-9a-f]{16}, attempt 1\)$`)
	for deadline := time.Now().Add(30 * time.Second); !want.MatchString(handler.out.String()); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the handler did not print the job within 30 s:\n%s\nwork:\n%s", handler.out.String(), work.out.String())
		}
	}
	if n := strings.Count(handler.out.String(), "recompute_financials "); n != 1 {
		t.Errorf("the handler ran %d jobs, want 1:\n%s", n, handler.out.String())
	}
	if c := work.stop(t); c != 0 {
		t.Errorf("work exit %d:\n%s", c, work.out.String())
	}
}

// runBinEnv runs any program (not the coalesce binary) and returns its exit
// status and output; a program that is not installed is status -1.
func runBinEnv(t *testing.T, env []string, name string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		return -1, "", err.Error()
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestDocPictures: every timeline in the docs drawn by `coalesce simulate`
// (an SVG image followed by the command that draws it) is what that command
// draws now from the shipped example log, so a change of the renderer or of
// the policies' behaviour shows here.
func TestDocPictures(t *testing.T) {
	t.Parallel()
	imageRe := regexp.MustCompile(`(?m)^!\[[^\]]*\]\(([^)]+\.svg)\)$`)
	pictures := 0
	for _, page := range docFiles(t) {
		md := string(mustRead(t, page))
		for _, m := range imageRe.FindAllStringSubmatch(md, -1) {
			block := codeBlock(t, md[strings.Index(md, m[0])-1:], m[0], "sh")
			command := strings.ReplaceAll(strings.TrimSpace(block), "\\\n", " ")
			args := strings.Fields(command)
			if len(args) < 3 || args[0] != "coalesce" || args[1] != "simulate" {
				t.Errorf("%s: the command under %s is not coalesce simulate: %q", page, m[1], command)
				continue
			}
			pictures++
			out := filepath.Join(t.TempDir(), "timeline.svg")
			drawn := ""
			for i, a := range args {
				switch {
				case strings.HasSuffix(a, ".svg"):
					drawn, args[i] = a, out
				case strings.HasPrefix(a, "examples/"):
					args[i] = filepath.Join(repoRoot, a)
				}
			}
			if filepath.Join(repoRoot, drawn) != filepath.Join(filepath.Dir(page), m[1]) {
				t.Errorf("%s: the command under %s draws %s", page, m[1], drawn)
				continue
			}
			code, _, stderr := runBin(t, "", args[1:]...)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", command, code, stderr)
			}
			if !bytes.Equal(mustRead(t, out), mustRead(t, filepath.Join(repoRoot, drawn))) {
				t.Errorf("%s is not what its command (in %s) draws now: run it again from the repository root", drawn, page)
			}
		}
	}
	if pictures < 2 {
		t.Errorf("%d pictures drawn by coalesce simulate found, want the README's and docs/simulate.md's", pictures)
	}
}

// TestDocSessions runs every shell session shown in the docs (lines "$ cmd"
// followed by its output, in README.md and docs/*.md) with the built binary
// as `coalesce` on PATH, and compares the output with the page.
func TestDocSessions(t *testing.T) {
	t.Parallel()
	path := filepath.Dir(binary(t)) + string(os.PathListSeparator) + os.Getenv("PATH")
	sessions := 0
	for _, page := range docFiles(t) {
		for _, block := range fenceRe.FindAllString(string(mustRead(t, page)), -1) {
			lines := strings.Split(block, "\n")
			lines = lines[1 : len(lines)-1] // the fences
			for i := 0; i < len(lines); i++ {
				command, ok := strings.CutPrefix(lines[i], "$ ")
				if !ok {
					continue
				}
				var want []string
				for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "$ ") {
					i++
					want = append(want, lines[i])
				}
				sessions++
				cmd := exec.Command("sh", "-c", command)
				cmd.Env = append(os.Environ(), "PATH="+path)
				out, err := cmd.CombinedOutput()
				if got := strings.TrimRight(string(out), "\n"); err != nil || got != strings.Join(want, "\n") {
					t.Errorf("%s: $ %s\nprints (%v):\n%s\nwhere the page shows:\n%s", page, command, err, got, strings.Join(want, "\n"))
				}
			}
		}
	}
	if sessions < 3 {
		t.Errorf("%d shell sessions found in the docs, want at least docs/fingerprint.md's 3", sessions)
	}
}

// TestConfigDocsNameEveryEnvVar: docs/configuration.md lists every
// environment variable the configuration reads.
func TestConfigDocsNameEveryEnvVar(t *testing.T) {
	t.Parallel()
	doc := string(mustRead(t, filepath.Join(repoRoot, "docs", "configuration.md")))
	vars := config.EnvVars()
	if len(vars) < 10 {
		t.Fatalf("config.EnvVars lists %d variables", len(vars))
	}
	for _, v := range vars {
		if !strings.Contains(doc, "`"+v.Name+"`") {
			t.Errorf("docs/configuration.md does not name %s (%s)", v.Name, v.Description)
		}
	}
}

// TestHTTPDocsCoverTheContract: docs/http-api.md, the readable page of
// api/openapi.yaml, names every operation the contract has ("GET /v1/…").
func TestHTTPDocsCoverTheContract(t *testing.T) {
	t.Parallel()
	var contract struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(mustRead(t, filepath.Join(repoRoot, "api", "openapi.yaml")), &contract); err != nil {
		t.Fatal(err)
	}
	doc := string(mustRead(t, filepath.Join(repoRoot, "docs", "http-api.md")))
	ops := 0
	for path, methods := range contract.Paths {
		for method := range methods {
			switch method {
			case "get", "post", "put", "patch", "delete":
			default:
				continue
			}
			ops++
			// "GET /metrics, /healthz" names the second path with the first's method.
			op := strings.ToUpper(method) + " " + path
			if !strings.Contains(doc, op) && !strings.Contains(doc, "`"+op+"?") && !strings.Contains(doc, ", `"+path+"`") {
				t.Errorf("docs/http-api.md does not document %s", op)
			}
		}
	}
	if ops < 20 {
		t.Fatalf("%d operations read from api/openapi.yaml", ops)
	}
}
