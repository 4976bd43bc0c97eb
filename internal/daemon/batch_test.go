package daemon_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/daemon"
)

// allocatedDuring is how many bytes the process allocated while f ran.
func allocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestBatchMemoryIsBounded: a batch is read line by line, so what it costs
// is bounded by the configuration, not by the body: 8 MiB of one-byte bad
// lines allocated 3.8 GB (a slice entry, an event and an answer per line)
// and is now refused at BatchMaxLines before any line is decided.
func TestBatchMemoryIsBounded(t *testing.T) {
	f := newAPIWith(t, func(c *daemon.APIConfig) { c.BodyLimit = 1 << 20 })
	// Unchecked: the contract check holds bodies in memory, which is what
	// this test measures.
	srv := httptest.NewServer(f.api.Handler())
	defer srv.Close()
	post := func(body []byte) (int, []byte) {
		resp, err := http.Post(srv.URL+"/v1/events:batch", "application/x-ndjson", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	blank := bytes.Repeat([]byte("\n"), 8<<20)
	var code int
	var out []byte
	if n := allocatedDuring(func() { code, out = post(blank) }); n > 48<<20 {
		t.Errorf("8 MiB of blank lines allocated %d MiB", n>>20)
	}
	if code != 200 || len(out) != 0 {
		t.Errorf("blank batch: %d, %d bytes answered", code, len(out))
	}
	bad := bytes.Repeat([]byte("x\n"), 4<<20)
	if n := allocatedDuring(func() { code, out = post(bad) }); n > 48<<20 {
		t.Errorf("8 MiB of one-byte bad lines allocated %d MiB", n>>20)
	}
	if code != 413 || !bytes.Contains(out, []byte(`"code":"batch_too_long"`)) {
		t.Errorf("4M lines: %d %s, want 413 batch_too_long", code, out)
	}
	// A batch within the limits, over the in-memory spool: every line answered.
	var good bytes.Buffer
	for i := range 20_000 {
		fmt.Fprintf(&good, `{"type":"notify","args":{"c":%d,"pad":"%s"}}`+"\n\n", i, strings.Repeat("p", 100))
	}
	code, out = post(good.Bytes())
	if got := bytes.Count(out, []byte(`"outcome":"published"`)); code != 200 || got != 20_000 {
		t.Errorf("20,000 events (%d KiB): %d, %d decisions", good.Len()>>10, code, got)
	}
}

// TestBatchAnsweredPastTheWriteTimeout: a batch that takes longer to decide
// than the server's write timeout still gets every answer; the client's
// retry would otherwise submit it all again. With write_timeout 1s and
// 20,000 lines the client once got no answer line while all 20,000 were
// decided.
func TestBatchAnsweredPastTheWriteTimeout(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) { c.BodyLimit = 1 << 20; c.WriteTimeout = time.Second })
	f.srv.Close()
	srv := httptest.NewUnstartedServer(f.api.Handler()) // unchecked: the contract check reads bodies up front
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	defer srv.Close()
	var in strings.Builder
	const n = 20_000
	for i := range n {
		fmt.Fprintf(&in, `{"type":"notify","args":{"c":%d}}`+"\n", i)
	}
	start := time.Now()
	resp, err := http.Post(srv.URL+"/v1/events:batch", "application/x-ndjson", strings.NewReader(in.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	decided := 0
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"outcome":"published"`)) {
			decided++
		}
	}
	took := time.Since(start)
	if decided != n {
		t.Errorf("%d of %d lines answered with their decision (batch took %v, write timeout 1s; read error %v)", decided, n, took.Round(time.Millisecond), sc.Err())
	}
	if took < time.Second {
		t.Logf("the batch took only %v: it did not outlast the write timeout", took)
	}
}

// TestBatchWaitingForASlotOutlastsTheReadTimeout sends two batches to a
// daemon deciding one at a time, the first long enough that the second
// waits for its slot past the server's read timeout. The second must be
// read and decided once its turn comes, not cut off: its client saw a
// broken pipe and nothing decided (found measuring hostile batches on the
// built binary: 8 clients at once, 4 cut off after the 10 s read timeout).
func TestBatchWaitingForASlotOutlastsTheReadTimeout(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) {
		c.BodyLimit = 1 << 20
		c.Batches = 1
		c.BatchWait = 5 * time.Minute // the first batch may take long on a loaded machine: the second must wait for it, not be refused
		c.ReadTimeout = time.Second
		c.WriteTimeout = time.Second
	})
	f.srv.Close()
	srv := httptest.NewUnstartedServer(f.api.Handler()) // unchecked: the contract check reads bodies up front
	srv.Config.ReadTimeout = time.Second
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	defer srv.Close()
	body := func(base, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"type":"notify","args":{"w":%d}}`+"\n", base+i)
		}
		return b.String()
	}
	const n = 20_000
	type result struct {
		decided int
		err     error
	}
	results := make(chan result, 2)
	for k := range 2 {
		go func() {
			if k == 1 {
				time.Sleep(100 * time.Millisecond) // the first takes the slot
			}
			resp, err := http.Post(srv.URL+"/v1/events:batch", "application/x-ndjson", strings.NewReader(body(k*n, n)))
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			decided := 0
			for sc.Scan() {
				if bytes.Contains(sc.Bytes(), []byte(`"outcome":"published"`)) {
					decided++
				}
			}
			results <- result{decided, sc.Err()}
		}()
	}
	for range 2 {
		r := <-results
		if r.err != nil || r.decided != n {
			t.Errorf("a batch: %d of %d lines decided (%v)", r.decided, n, r.err)
		}
	}
}

// TestBatchRefusedAfterWaitingIsAnswered: a batch that waits for a slot
// longer than the server's write timeout and is then refused (429 busy)
// must receive that answer. Its client saw the connection close with no
// response (EOF) — the 429 was written past the write deadline — so it
// could not tell "refused, send again" from "lost". One batch holds its
// body open, so once it has the slot it keeps it; the other is sent until
// it finds the slot taken (each try that finds it free is decided at once),
// and its wait (1.5 s) outlasts the write timeout (1 s) for certain.
func TestBatchRefusedAfterWaitingIsAnswered(t *testing.T) {
	t.Parallel()
	f := newAPIWith(t, func(c *daemon.APIConfig) {
		c.Batches = 1
		c.BatchWait = 1500 * time.Millisecond
		c.WriteTimeout = time.Second
	})
	f.srv.Close()
	srv := httptest.NewUnstartedServer(f.api.Handler()) // unchecked: the contract check would read the held body up front
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	defer srv.Close()
	type answer struct {
		code int
		body []byte
		err  error
	}
	post := func(body io.Reader) (a answer, retryAfter string) {
		resp, err := http.Post(srv.URL+"/v1/events:batch", "application/x-ndjson", body)
		if err != nil {
			return answer{err: err}, ""
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, b, err}, resp.Header.Get("Retry-After")
	}
	pr, pw := io.Pipe()
	held := make(chan answer, 1)
	go func() { a, _ := post(pr); held <- a }()
	go func() { _, _ = fmt.Fprintf(pw, `{"type":"notify","args":{"held":1}}`+"\n") }()
	defer pw.Close()
	refused := false
	for try := 0; try < 100 && !refused; try++ {
		a, after := post(strings.NewReader(fmt.Sprintf(`{"type":"notify","args":{"try":%d}}`+"\n", try)))
		switch {
		case a.err != nil:
			t.Fatalf("try %d: no answer (%v); want 429 busy, or 200 while the slot was free", try, a.err)
		case a.code == http.StatusTooManyRequests:
			if !bytes.Contains(a.body, []byte(`"code":"busy"`)) || after == "" {
				t.Fatalf("try %d: 429 %s Retry-After %q; want code busy and a Retry-After", try, a.body, after)
			}
			refused = true
		case a.code != 200:
			t.Fatalf("try %d: %d %s", try, a.code, a.body)
		default:
			time.Sleep(50 * time.Millisecond) // the slot was free: the held batch has not reached it yet
		}
	}
	if !refused {
		t.Fatal("the held batch never took the slot in 100 tries")
	}
	pw.Close()
	if a := <-held; a.err != nil || a.code != 200 || !bytes.Contains(a.body, []byte(`"outcome"`)) {
		t.Errorf("the batch that held the slot: %d %s (%v)", a.code, a.body, a.err)
	}
}
