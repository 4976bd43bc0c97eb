package dashboard

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/coalesce-io/coalesce/internal/access"
)

//go:embed web/*.html web/static
var webFS embed.FS

var pageTemplates = template.Must(template.ParseFS(webFS, "web/*.html"))

// pages are the dashboard's pages: path (under Path) -> template and title.
var pages = map[string]struct{ tmpl, title string }{
	"":         {"overview", "Overview"},
	"rounds":   {"rounds", "Pending rounds"},
	"round":    {"round", "Round"},
	"explain":  {"explain", "Explain"},
	"dead":     {"dead", "Dead letters"},
	"letter":   {"letter", "Dead letter"},
	"policies": {"policies", "Policies"},
	"workers":  {"workers", "Workers"},
}

// pageData is what every page template gets: where things are and what the
// signed-in browser may do. The data itself comes from the JSON API.
type pageData struct {
	Page, Title, Path, API string
	Level                  string // "write" or "read"
	CSRF                   string
	SignOut                bool // signed in with a token (else the dashboard is open)
	Error                  string
	Nav                    []navItem
}

type navItem struct{ Href, Title, Page string }

// Handler serves the pages at Path, their assets, the sign-in, the
// timeline pictures and, when APIBase is empty, the JSON API under
// Path+"api/". Mount it at Path: mux.Handle("/ui/", d.Handler()).
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	p := d.cfg.Path
	static, _ := fs.Sub(webFS, "web/static")
	mux.Handle(p+"assets/", http.StripPrefix(p+"assets/", cacheAssets(http.FileServerFS(static))))
	mux.HandleFunc(p+"sign-in", d.signIn)
	mux.HandleFunc(p+"sign-out", d.signOut)
	mux.HandleFunc(p+"timeline.svg", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := d.pageAccess(w, r); ok {
			d.timelineSVG(w, r)
		}
	})
	if d.cfg.APIBase == "" {
		mux.Handle(p+"api/", http.StripPrefix(strings.TrimSuffix(p, "/")+"/api", d.api()))
	}
	mux.HandleFunc(p, d.page)
	return securityHeaders(mux)
}

// securityHeaders: no inline script or style, no framing, no sniffing.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

func cacheAssets(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// pageAccess returns what the browser may do; without a session (when
// tokens are set) it redirects to the sign-in page.
func (d *Dashboard) pageAccess(w http.ResponseWriter, r *http.Request) (access.Session, bool) {
	if d.access.Open() {
		return access.Session{Level: access.Write}, true
	}
	s, ok := d.access.Session(r, time.Now())
	if !ok {
		http.Redirect(w, r, d.cfg.Path+"sign-in", http.StatusSeeOther)
		return s, false
	}
	return s, true
}

func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, d.cfg.Path)
	pg, ok := pages[name]
	if !ok || r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.NotFound(w, r)
		return
	}
	s, ok := d.pageAccess(w, r)
	if !ok {
		return
	}
	data := d.data(pg.tmpl, pg.title)
	data.Level, data.CSRF, data.SignOut = s.Level.String(), s.CSRF, !d.access.Open()
	d.render(w, http.StatusOK, pg.tmpl, data)
}

func (d *Dashboard) data(page, title string) pageData {
	api := d.cfg.APIBase
	if api == "" {
		api = d.cfg.Path + "api/"
	}
	p := d.cfg.Path
	return pageData{Page: page, Title: title, Path: p, API: api, Nav: []navItem{
		{p, "Overview", "overview"}, {p + "rounds", "Pending rounds", "rounds"}, {p + "explain", "Explain", "explain"},
		{p + "dead", "Dead letters", "dead"}, {p + "policies", "Policies", "policies"}, {p + "workers", "Workers", "workers"},
	}}
}

func (d *Dashboard) render(w http.ResponseWriter, status int, tmpl string, data pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := pageTemplates.ExecuteTemplate(w, tmpl, data); err != nil {
		d.log.Error("dashboard: page", "page", tmpl, "err", err)
	}
}

func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	data := d.data("sign-in", "Sign in")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if d.access.Open() {
			http.Redirect(w, r, d.cfg.Path, http.StatusSeeOther)
			return
		}
		d.render(w, http.StatusOK, "signin", data)
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
		c, _, ok := d.access.SignIn(r.PostFormValue("token"), "/", r.TLS != nil, time.Now())
		if !ok {
			data.Error = "That token is not one of http.tokens or http.read_tokens."
			d.render(w, http.StatusUnauthorized, "signin", data)
			return
		}
		http.SetCookie(w, c)
		http.Redirect(w, r, d.cfg.Path, http.StatusSeeOther)
	default:
		http.Error(w, "use GET or POST", http.StatusMethodNotAllowed)
	}
}

func (d *Dashboard) signOut(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	http.SetCookie(w, access.SignOut("/", r.TLS != nil))
	http.Redirect(w, r, d.cfg.Path+"sign-in", http.StatusSeeOther)
}
