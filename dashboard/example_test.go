package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/coalesce-io/coalesce/dashboard"
	"github.com/coalesce-io/coalesce/debounce"
	"github.com/coalesce-io/coalesce/publisher"
)

// A Go program that embeds coalesce mounts the dashboard at /ui/: its pages
// and, under /ui/api/, the JSON API they read.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// In-process Redis and JetStream (real servers in production).
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Now()) // expiry times (part of a round's token) read back as written
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), DisableIdentity: true, MaxRetries: -1})
	dir, _ := os.MkdirTemp("", "coalesce-example-")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	srv.Start()
	defer srv.Shutdown()
	srv.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(srv.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	pub, err := publisher.New(ctx, js, nil)
	if err != nil {
		panic(err)
	}

	rec := dashboard.NewRecorder() // counts decisions for the overview
	co, err := debounce.New(debounce.Config{Redis: rdb, Publisher: pub, Hooks: rec.Hooks(debounce.Hooks{}),
		Policies: []debounce.Policy{{Type: "recompute", Mode: debounce.ModeDebounce, Window: time.Minute, KeyFields: []string{"tenant_id"}}}})
	if err != nil {
		panic(err)
	}
	dash, err := dashboard.New(dashboard.Config{Coalescer: co, Publisher: pub, JetStream: js, Recorder: rec,
		Path: "/ui/", Tokens: []string{"s3cret"}})
	if err != nil {
		panic(err)
	}
	go dash.Run(ctx)
	mux := http.NewServeMux()
	mux.Handle("/ui/", dash.Handler())
	web := httptest.NewServer(mux)
	defer web.Close()

	for _, order := range []int{1, 2, 3} {
		args := fmt.Sprintf(`{"tenant_id":42,"order":%d}`, order)
		if _, err := co.Submit(ctx, debounce.Event{Type: "recompute", Args: json.RawMessage(args)}); err != nil {
			panic(err)
		}
	}
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", web.URL+path, nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var ov dashboard.Overview
	_, body := get("/ui/api/v1/overview")
	_ = json.Unmarshal([]byte(body), &ov)
	fmt.Printf("events %.0f, jobs %.0f, saved %.0f, pending %d\n", ov.Totals.Events, ov.Totals.Jobs, ov.Totals.Saved, ov.Totals.Pending)
	var page dashboard.RoundsPage
	_, body = get("/ui/api/v1/rounds/recompute")
	_ = json.Unmarshal([]byte(body), &page)
	fmt.Println(len(page.Rounds), "round:", page.Rounds[0].State, string(page.Rounds[0].Args))
	code, body := get("/ui/")
	fmt.Println(code, strings.Contains(body, "jobs saved"))
	// Output:
	// events 3, jobs 1, saved 2, pending 1
	// 1 round: pending {"tenant_id":42,"order":1}
	// 200 false
}
