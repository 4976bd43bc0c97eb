// Package dashboard is coalesce's web dashboard: what is pending, how many
// jobs coalescing saved, dead letters and explain, in the browser, as an
// http.Handler built from a Coalescer and its Publisher.
//
// `coalesce serve` mounts it at /ui/ (http.ui). A Go program that embeds the
// library mounts it itself, as asynqmon or River UI:
//
//	rec := dashboard.NewRecorder()                // counts decisions, keeps recent rounds
//	cfg.Hooks = rec.Hooks(cfg.Hooks)              // on the debounce.Config, before debounce.New
//	dash, err := dashboard.New(dashboard.Config{Coalescer: co, Publisher: pub, JetStream: js,
//		Recorder: rec, Path: "/ui/", Tokens: []string{token}})
//	go dash.Run(ctx)                               // samples the overview's charts
//	mux.Handle("/ui/", dash.Handler())
//
// The pages are server-rendered HTML with a little vanilla JavaScript,
// embedded in the binary (no CDN, no build step); every number on them
// comes from the JSON API (Routes), which the daemon serves under /v1 for
// the CLI and other tools too. Sign-in takes one of the API's bearer tokens
// and keeps it in an HttpOnly, SameSite=Strict cookie; actions also need the
// page's CSRF token; a read-only token sees everything and changes nothing.
package dashboard
