package worker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/internal/redact"
)

// Push delivers each job to an HTTP handler in any language: `coalesce work
// --post URL`. The worker closes the job's round at start as for any
// handler, then Push POSTs the job's Document (the JSON --exec writes on
// stdin) to URL and maps the answer:
//
//   - 2xx acknowledges the job;
//   - 408, 429, 5xx, a connection error or a timeout retries it with the
//     worker's backoff (attempts counted as for any handler error);
//   - any other status (3xx is not followed, 4xx) dead-letters it at once.
//
// The worker reports progress to JetStream while the request runs, so a slow
// handler is not redelivered; Concurrency bounds the requests in flight. A
// retried job carries the same summary and items (the round's data is kept
// for the job's retries).
//
// Headers, besides Content-Type: application/json:
//
//	Coalesce-Job-Type     the job type
//	Coalesce-Round        the round token (16 hex digits; absent when bypassed)
//	Coalesce-Round-Key    the round key (64 hex digits)
//	Coalesce-Attempt      1 for the first delivery that reached the handler
//	Coalesce-Release      what closing the round said (released, retry, ...)
//	Idempotency-Key       the job's identity (debounce.Job.ID): <round
//	                      key>.<round token>, or <round key>.<bypass> for a
//	                      bypassed job; the same for every attempt of one job
//	                      (and its replay), another for every other job
//	traceparent           the producer's W3C trace context, when it sent one
//	Authorization         Bearer <Token>, when Token is set
//	Coalesce-Signature    t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>"
//	                      keyed with Secret>, when Secret is set
type PushConfig struct {
	URL     string        // http:// or https://, required
	Token   string        // bearer token sent with each request; optional
	Secret  []byte        // HMAC key of Coalesce-Signature; optional
	Timeout time.Duration // per request; DefaultPushTimeout
	Client  *http.Client  // nil: a client that follows no redirect
	// Result, when set, hears each request's outcome: the status class
	// ("2xx", "4xx", "5xx"), "408" or "429", or "error" (no answer).
	Result func(jobType, result string)
}

// DefaultPushTimeout bounds one push request.
const DefaultPushTimeout = 5 * time.Minute

// pushErrorBody is how much of an error answer is kept for the log.
const pushErrorBody = 512

// Push returns the Handler that POSTs each job to cfg.URL, or an error
// naming what is wrong with cfg.
func Push(cfg PushConfig) (Handler, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: push URL %q: want an absolute http:// or https:// URL", ErrInvalidConfig, redact.URL(cfg.URL))
	}
	where := redact.URL(cfg.URL) // what errors and logs name: no password, no secret query parameter
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultPushTimeout
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	result := cfg.Result
	if result == nil {
		result = func(string, string) {}
	}
	return func(ctx context.Context, job *Job) error {
		body, err := json.Marshal(job.Document())
		if err != nil {
			return Permanent(fmt.Errorf("push: encoding the job: %w", err))
		}
		ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
		if err != nil {
			return Permanent(fmt.Errorf("push: %w", err))
		}
		setPushHeaders(req.Header, job, body, cfg, time.Now())
		resp, err := client.Do(req)
		if err != nil {
			result(job.Type, "error")
			return fmt.Errorf("push to %s: %w", where, redact.Error(err))
		}
		defer resp.Body.Close()
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, pushErrorBody))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // reuse the connection
		code := resp.StatusCode
		switch {
		case code >= 200 && code < 300:
			result(job.Type, "2xx")
			return nil
		case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests:
			result(job.Type, strconv.Itoa(code))
		case code >= 500:
			result(job.Type, "5xx")
		default:
			result(job.Type, fmt.Sprintf("%dxx", code/100))
			return Permanent(pushStatusError(where, resp, snippet))
		}
		return pushStatusError(where, resp, snippet)
	}, nil
}

func pushStatusError(where string, resp *http.Response, snippet []byte) error {
	text := strings.TrimSpace(strings.ToValidUTF8(string(snippet), "?"))
	if text == "" {
		return fmt.Errorf("push to %s: %s", where, resp.Status)
	}
	return fmt.Errorf("push to %s: %s: %s", where, resp.Status, text)
}

func setPushHeaders(h http.Header, job *Job, body []byte, cfg PushConfig, now time.Time) {
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "coalesce-push/1")
	h.Set("Coalesce-Job-Type", job.Type)
	round := job.Token.String()
	if round != "" {
		h.Set("Coalesce-Round", round)
	}
	h.Set("Coalesce-Round-Key", job.Key.String())
	h.Set("Coalesce-Attempt", strconv.Itoa(job.Attempt))
	h.Set("Coalesce-Release", string(job.Release))
	h.Set("Idempotency-Key", job.ID())
	if job.TraceParent != "" {
		h.Set("traceparent", job.TraceParent)
	}
	if cfg.Token != "" {
		h.Set("Authorization", "Bearer "+cfg.Token)
	}
	if len(cfg.Secret) > 0 {
		h.Set("Coalesce-Signature", PushSignature(cfg.Secret, now, body))
	}
}

// PushSignature is the Coalesce-Signature of a push body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<unix seconds>.<body>")>".
// A handler recomputes v1 from the t it got and the raw body, compares in
// constant time, and refuses a t too far from its clock (replays).
func PushSignature(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// ErrPushSignature is returned by VerifyPushSignature for a signature that
// does not match, or is too old or too new.
var ErrPushSignature = errors.New("push signature does not match")

// VerifyPushSignature checks a Coalesce-Signature header against the raw
// body, accepting a t within tolerance of now: what a handler written in Go
// does (handlers in other languages do the same in a few lines).
func VerifyPushSignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, v1 string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || v1 == "" {
		return fmt.Errorf("%w: want t=<unix seconds>,v1=<hex>", ErrPushSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %v from now, more than %v", ErrPushSignature, d.Round(time.Second), tolerance)
	}
	want := PushSignature(secret, time.Unix(sec, 0), body)
	if !hmac.Equal([]byte(want), []byte("t="+ts+",v1="+v1)) {
		return ErrPushSignature
	}
	return nil
}
