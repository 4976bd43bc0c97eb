package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coalesce-io/coalesce/internal/testenv"
	"github.com/coalesce-io/coalesce/publisher"
)

// TestReadyzFlagsALimitThatDropsSchedules: an operator adds max_msgs to the
// stream while coalesce serve runs; the stream would now drop the oldest
// pending schedules to make room, and /readyz says so, naming the limit.
// (Nothing looked: three publishes on a max-2 stream succeeded and the first
// round never ran.)
func TestReadyzFlagsALimitThatDropsSchedules(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedis(t)
	srv := testenv.NATS(t)
	httpAddr := freeAddr(t)
	serve := start(t, "serve", "--redis", rs.URL, "--nats", srv.URL, "--http", httpAddr)
	waitHTTP(t, "http://"+httpAddr+"/readyz", serve)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, publisher.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	c.MaxMsgs = 2
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "max_msgs is 2") {
		t.Errorf("/readyz with max_msgs 2 on the stream: %d %s", resp.StatusCode, body)
	}
}
