// Command chaosworker is the worker process of the chaos suite: the same
// worker as `coalesce work` (configuration, connections, worker.Config, metrics
// hooks), with an in-process handler instead of --exec so that a job start is
// logged (one JSON line, written before the handler does anything else) at
// the moment the round was released, and thousands of jobs a second cost no
// fork. Like `coalesce work --metrics`, it serves the worker's Prometheus
// metrics (--metrics).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/coalesce-io/coalesce/internal/chaos"
	"github.com/coalesce-io/coalesce/internal/config"
	"github.com/coalesce-io/coalesce/internal/daemon"
	"github.com/coalesce-io/coalesce/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfgPath := flag.String("config", "", "YAML configuration (policies, worker)")
	redisURL := flag.String("redis", "", "Redis URL")
	natsURL := flag.String("nats", "", "NATS URL")
	types := flag.String("type", "", "job types, comma-separated")
	out := flag.String("out", "", "job start log (JSON lines, appended)")
	name := flag.String("name", "w", "worker name in the log")
	metricsAddr := flag.String("metrics", "", "serve /metrics here")
	sleepMax := flag.Duration("sleep-max", 0, "each job sleeps a random [0, sleep-max)")
	ackWait := flag.Duration("ack-wait", 0, "as coalesce work --ack-wait")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	env := func(k string) string {
		switch k {
		case "COALESCE_REDIS_URL":
			return *redisURL
		case "COALESCE_REDIS_ADDRS":
			return ""
		case "COALESCE_NATS_URL":
			return *natsURL
		}
		return os.Getenv(k)
	}
	cfg, err := config.Load(*cfgPath, env)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()

	m := daemon.NewMetrics(append(cfg.Types(), strings.Split(*types, ",")...)...)
	conns, err := daemon.Connect(ctx, cfg, log, m, false)
	if err != nil {
		return err
	}
	defer conns.Close()
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	// As runWork in cmd/coalesce/work.go.
	wc := worker.Config{
		JetStream: conns.JetStream, Stream: conns.Publisher.Stream(), Subjects: conns.Publisher.Subjects(),
		Coalescer: conns.Coalescer, Publisher: conns.Publisher, Types: strings.Split(*types, ","),
		Concurrency: cfg.Worker.Concurrency, MaxDeliver: cfg.Worker.MaxDeliver, AckWait: cfg.Worker.AckWait,
		Backoff: cfg.Worker.Backoff, Logger: log, Hooks: m.WorkerHooks(),
	}
	if *ackWait > 0 {
		wc.AckWait = *ackWait
	}
	w, err := worker.New(wc)
	if err != nil {
		return err
	}
	go daemon.ReconcileOnFailover(ctx, conns.Coalescer, m, log) // as coalesce work
	var mu sync.Mutex
	pid := os.Getpid()
	handler := func(ctx context.Context, job *worker.Job) error {
		at := time.Now().UnixNano()
		var args struct {
			EID string `json:"eid"`
		}
		_ = json.Unmarshal(job.Args, &args)
		rec := chaos.JobStart{
			At: at, Worker: *name, PID: pid, Type: job.Type, Key: job.Key.String(), Round: job.Token.String(),
			Release: string(job.Release), Attempt: job.Attempt, Version: job.Version, Events: job.Summary.Events,
			Items: len(job.Summary.Items), OpenedAt: job.OpenedAt.UnixMilli(), EID: args.EID,
		}
		if !job.DueAt.IsZero() {
			rec.DueAt = job.DueAt.UnixMilli()
		}
		for _, it := range job.Summary.Items {
			rec.ItemList = append(rec.ItemList, string(it))
		}
		if len(job.Summary.Payload) > 0 {
			var p struct {
				EID string `json:"eid"`
			}
			_ = json.Unmarshal(job.Summary.Payload, &p)
			rec.PayloadEID = p.EID
		}
		line, _ := json.Marshal(rec)
		line = append(line, '\n')
		mu.Lock()
		_, werr := f.Write(line) // unbuffered: a SIGKILL loses nothing written
		mu.Unlock()
		if werr != nil {
			return fmt.Errorf("job log: %w", werr)
		}
		if *sleepMax > 0 {
			select {
			case <-time.After(rand.N(*sleepMax)):
			case <-ctx.Done():
			}
		}
		rec.End = time.Now().UnixNano()
		line, _ = json.Marshal(rec)
		line = append(line, '\n')
		mu.Lock()
		_, _ = f.Write(line)
		mu.Unlock()
		return nil
	}
	log.Info("working", "types", *types, "name", *name)
	return w.Run(ctx, handler)
}
