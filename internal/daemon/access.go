package daemon

import (
	"errors"
	"net/http"

	"github.com/coalesce-io/coalesce/internal/access"
)

// readOnlyPosts are the routes that take a POST and change nothing: a
// read-only token may call them.
var readOnlyPosts = map[string]bool{"explain": true}

// acts reports whether a request on route name changes something: any
// method but GET and HEAD, except the read-only POST routes.
func acts(name, method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return !readOnlyPosts[name]
}

// allow checks what r may do on route name (when the route needs auth): a
// bearer token or the dashboard's session cookie (with its CSRF token for
// an action) is needed, and a read-only one may not act.
func (a *API) allow(w http.ResponseWriter, r *http.Request, name string, auth bool) *apiError {
	if !auth {
		return nil
	}
	lvl, err := a.access.Request(r)
	switch {
	case errors.Is(err, access.ErrCSRF):
		return errf(http.StatusForbidden, "csrf", "", "missing or stale CSRF token (%s): reload the page and try again", access.CSRFHeader)
	case lvl == access.None:
		w.Header().Set("WWW-Authenticate", `Bearer realm="coalesce"`)
		return errf(http.StatusUnauthorized, "unauthorized", "", "missing or wrong bearer token: send Authorization: Bearer <token>")
	case lvl < access.Write && acts(name, r.Method):
		return errf(http.StatusForbidden, "read_only", "", "a read-only token cannot %s %s; use a token from http.tokens", r.Method, r.URL.Path)
	}
	return nil
}
