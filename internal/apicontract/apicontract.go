// Package apicontract checks HTTP exchanges with coalesce serve against its
// OpenAPI document (package api), with the pb33f OpenAPI 3.1 validator: a
// test serves the API through Checker.Handler, and every response its
// requests get is validated (status documented for the operation, headers,
// body schema), and the statuses seen are counted, so that a suite can tell
// which documented answers it never produced.
package apicontract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/content"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/coalesce-io/coalesce/api"
)

// Operation names one documented answer: method, path template, status.
type Operation struct {
	Method, Path string
	Status       int
}

func (o Operation) String() string { return fmt.Sprintf("%s %s %d", o.Method, o.Path, o.Status) }

// Checker validates exchanges and remembers which documented answers were
// seen. Safe for concurrent use.
type Checker struct {
	doc  *v3.Document
	v    validator.Validator
	opts *config.ValidationOptions
	mu   sync.Mutex
	seen map[Operation]int
}

// New loads the document and checks it against the OpenAPI 3.1 schema.
func New() (*Checker, error) {
	d, err := libopenapi.NewDocument(api.YAML())
	if err != nil {
		return nil, fmt.Errorf("apicontract: %w", err)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("apicontract: %w", err)
	}
	opts := []config.Option{config.WithBodyDecoder("application/x-ndjson", ndjson{})}
	v, errs := validator.NewValidator(d, opts...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("apicontract: %w", errors.Join(errs...))
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("apicontract: the document is not valid OpenAPI: %s", describe(verrs))
	}
	return &Checker{doc: &m.Model, v: v, opts: config.NewValidationOptions(opts...), seen: map[Operation]int{}}, nil
}

// ndjson decodes an NDJSON body as the array of its lines' values (the
// document describes such bodies as arrays, one item per line). A line that
// is not JSON is left out: a batch answers it in place, and the answer is
// what is checked.
type ndjson struct{}

func (ndjson) Decode(in *content.DecodeInput) (any, error) {
	out := []any{}
	sc := bufio.NewScanner(in.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			if in.Direction == content.Response {
				return nil, fmt.Errorf("an answer line is not JSON: %.200s", line)
			}
			continue
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// Documented lists every (method, path, status) the document declares.
func (c *Checker) Documented() []Operation {
	var out []Operation
	for path, item := range c.doc.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code := range op.Responses.Codes.KeysFromOldest() {
				n, err := strconv.Atoi(code)
				if err == nil {
					out = append(out, Operation{strings.ToUpper(method), path, n})
				}
			}
		}
	}
	sortOps(out)
	return out
}

// Routes lists every (method, path) the document declares.
func (c *Checker) Routes() map[string][]string {
	out := map[string][]string{}
	for path, item := range c.doc.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().KeysFromOldest() {
			out[path] = append(out[path], strings.ToUpper(method))
		}
		slices.Sort(out[path])
	}
	return out
}

// Seen returns the documented answers observed so far, with counts.
func (c *Checker) Seen() map[Operation]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[Operation]int, len(c.seen))
	for k, v := range c.seen {
		out[k] = v
	}
	return out
}

// Handler serves h and checks each exchange once it is complete: the
// response must be one the document declares for the operation (status,
// required headers, body schema). A request to a path or method the
// document does not have must be answered 404 or 405 with an error body. A
// request that does not validate must be refused (4xx), except a batch,
// whose bad lines are answered in place. Each failure goes to report.
func (c *Checker) Handler(h http.Handler, report func(failure string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is copied as the handler reads it (a handler that
		// waits before reading, for a slot say, still does).
		var body bytes.Buffer
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(r.Body, &body), r.Body}
		rec := &tee{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		for _, f := range c.Check(r.Clone(r.Context()), body.Bytes(), rec.status, rec.Header().Clone(), rec.body.Bytes()) {
			report(f)
		}
	})
}

// Check validates one exchange (the request's body given apart, since the
// handler consumed it), and returns what does not match the document.
func (c *Checker) Check(r *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) (fails []string) {
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	what := fmt.Sprintf("%s %s -> %d", r.Method, r.URL.RequestURI(), status)
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	req.RequestURI = ""
	item, _, tmpl := paths.FindPath(req, c.doc, c.opts)
	var op *v3.Operation
	if item != nil {
		op = item.GetOperations().GetOrZero(strings.ToLower(r.Method))
	}
	if op != nil && op.RequestBody != nil && op.RequestBody.Content.Len() == 1 {
		// The daemon reads its one body type whatever Content-Type says
		// (curl -d sends application/x-www-form-urlencoded): the document
		// says so, and the body is checked as that type.
		for ct := range op.RequestBody.Content.KeysFromOldest() {
			if mt, _, _ := strings.Cut(req.Header.Get("Content-Type"), ";"); strings.TrimSpace(mt) != ct {
				req.Header.Set("Content-Type", ct)
			}
		}
	}
	if op == nil {
		// Outside the contract: an unknown route or method must be refused
		// as the router does, with an error body.
		if (status != http.StatusNotFound && status != http.StatusMethodNotAllowed) || !isErrorBody(respBody) {
			fail("%s: %s is not in the document (add it to api/openapi.yaml), and the answer is not a 404/405 error body: %.300s", what, r.Method+" "+r.URL.Path, respBody)
		}
		return fails
	}
	c.mu.Lock()
	c.seen[Operation{r.Method, tmpl, status}]++
	c.mu.Unlock()
	if status < 400 || status == http.StatusUnprocessableEntity || r.URL.Path == "/v1/events:batch" {
		if ok, errs := c.v.ValidateHttpRequestSync(req); !ok && status < 400 && r.URL.Path != "/v1/events:batch" {
			fail("%s: the request does not match the document, yet it was accepted: %s", what, describe(errs))
		}
	}
	resp := &http.Response{
		StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(respBody)),
		Request: req, ContentLength: int64(len(respBody)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
	if r.Method == http.MethodHead {
		return fails // no body to check
	}
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if ok, errs := c.v.ValidateHttpResponse(req, resp); !ok {
		fail("%s: the response does not match the document: %s\nbody: %.500s", what, describe(errs), respBody)
	}
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && header.Get("Retry-After") == "" {
		fail("%s: a %d without Retry-After", what, status)
	}
	return fails
}

func isErrorBody(b []byte) bool {
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	return json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Code != "" && e.Error.Message != ""
}

func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  - %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s at %s", s.Reason, s.FieldPath)
		}
	}
	return b.String()
}

func sortOps(ops []Operation) {
	sort.Slice(ops, func(i, j int) bool {
		a, b := ops[i], ops[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Method != b.Method {
			return a.Method < b.Method
		}
		return a.Status < b.Status
	})
}

// Missing returns the documented answers never seen, but those excused
// (an operation's status, or all its statuses with Status 0, mapped to why).
func (c *Checker) Missing(excused map[Operation]string) []Operation {
	seen := c.Seen()
	var out []Operation
	for _, op := range c.Documented() {
		if seen[op] > 0 {
			continue
		}
		if _, ok := excused[op]; ok {
			continue
		}
		if _, ok := excused[Operation{op.Method, op.Path, 0}]; ok {
			continue
		}
		out = append(out, op)
	}
	return out
}

// tee writes through to the client and keeps a copy of the answer.
type tee struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (t *tee) WriteHeader(code int) {
	if !t.wrote {
		t.status, t.wrote = code, true
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *tee) Write(b []byte) (int, error) {
	t.wrote = true
	t.body.Write(b)
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (t *tee) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *tee) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
