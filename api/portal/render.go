package portal

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hookd/hookd/store"
)

//go:embed templates/*.html static/*
var assets embed.FS

// pages holds one parsed template set per page, each with the layout.
type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"ms":          func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) },
	"dur":         formatDuration,
	"pct":         pct,
	"join":        strings.Join,
	"add":         func(a, b int) int { return a + b },
	"add64":       func(a, b int64) int64 { return a + b },
	"windowNames": func() []string { return []string{"24h", "7d", "30d"} },
	"testType":    testType,
	"latency":     latency,
	"codeNames":   func() []string { return []string{"2xx", "3xx", "4xx", "5xx", "none"} },
	"stateNames":  func() []string { return []string{"pending", "retrying", "delivered", "dead"} },
	"stateLabel":  stateLabel,
	"tierName":    tierName,
	"short":       func(s string, n int) string { return clipN(s, n) },
	"stateTag":    stateTag,
}

func loadPages() (*pages, error) {
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range names {
		if strings.HasSuffix(name, "/layout.html") {
			continue
		}
		t, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("portal template %s: %w", name, err)
		}
		p.byName[strings.TrimSuffix(strings.TrimPrefix(name, "templates/"), ".html")] = t
	}
	return p, nil
}

// view is what every page renders.
type view struct {
	Name string
	// Path is the page's own path and query (the time-zone form comes back to it).
	Path  string
	clock readerClock
	// Accent is set when the operator chose an accent colour (brand.css).
	Accent bool
	Logo   template.URL
	Title  string
	// Nav names the active tab.
	Nav    string
	S      *session
	Notice *notice
	// LoginCSRF is the sign-in forms' token (pages without a session).
	LoginCSRF string
	Data      any
}

// CSRF is the token of the session's forms.
func (v view) CSRF() string {
	if v.S == nil {
		return ""
	}
	return v.S.CSRFToken
}

// render writes page name with status; a template error is a 500, found by
// the tests that render every page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) error {
	t, ok := h.pages.byName[name]
	if !ok {
		return fmt.Errorf("no page %q", name)
	}
	v.Name, v.Accent, v.Logo = h.cfg.Name, h.cfg.AccentColor != "", h.cfg.logo()
	v.clock, v.Path = readerClock{now: h.now(), zone: zoneOf(r)}, r.URL.RequestURI()
	if v.S != nil && v.Notice == nil {
		v.Notice = v.S.notice
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("rendering %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// problem is the data of the error page.
type problem struct {
	Heading string
	Text    string
	// Hint says what to do.
	Hint string
	// SignIn offers the way back in.
	SignIn bool
}

// fail answers a handler's error with its page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, p := http.StatusInternalServerError, problem{Heading: "Something went wrong",
		Text: "The portal could not finish this request; nothing was changed by it unless a notice says so.",
		Hint: "Try again in a moment. If it keeps happening, tell your contact at " + h.cfg.Name + "."}
	switch {
	case errors.Is(err, errBadInput):
		status, p = http.StatusBadRequest, problem{Heading: "That did not work",
			Text: strings.TrimPrefix(err.Error(), errBadInput.Error()+": "), Hint: "Nothing was changed. Go back, correct it and try again."}
	case errors.Is(err, errNotFound):
		status, p = http.StatusNotFound, problem{Heading: "Not found",
			Text: "There is nothing here for this session: the address is wrong, or it belongs to another account or endpoint.",
			Hint: "Use the links in the portal rather than edited addresses."}
	case errors.Is(err, errReadOnly):
		status, p = http.StatusForbidden, problem{Heading: "This link is read-only",
			Text: "Your portal link lets you look, not change things. Nothing was changed.",
			Hint: "Ask " + h.cfg.Name + " for a link that allows management."}
	case errors.Is(err, errCSRF):
		status, p = http.StatusForbidden, problem{Heading: "Form refused",
			Text: "This form did not come from this portal page, or its security token is missing or stale. Nothing was changed.",
			Hint: "Reload the page and submit the form again."}
	case errors.Is(err, errNoSession):
		status, p = http.StatusUnauthorized, problem{Heading: "Sign in to see this",
			Text: "You are not signed in to the " + h.cfg.Name + " delivery portal.",
			Hint: "Open the portal link you were given. Links work once and expire; ask for a new one if yours did.", SignIn: true}
	case errors.Is(err, errEnded):
		status, p = http.StatusUnauthorized, problem{Heading: "Your session has ended",
			Text: fmt.Sprintf("Portal sessions end after %s without activity, %s after sign-in, or at sign-out.",
				formatDuration(h.cfg.SessionIdle), formatDuration(h.cfg.SessionMax)),
			Hint: "Ask for a new portal link, or open the product's settings page that links here.", SignIn: true}
	case errors.Is(err, errStarting):
		status, p = http.StatusServiceUnavailable, problem{Heading: "Starting",
			Text: "The " + h.cfg.Name + " delivery portal is starting and not connected to its database yet.", Hint: "Reload in a few seconds."}
	default:
		h.logger.ErrorContext(r.Context(), "portal request failed", "method", r.Method, "route", routeName(r), "error", err)
	}
	if rerr := h.render(w, r, status, "problem", view{Title: p.Heading, Data: p}); rerr != nil {
		h.logger.ErrorContext(r.Context(), "portal error page failed", "error", rerr)
		http.Error(w, p.Heading, status)
	}
}

// routeName is the route of a request without its values, for logs: a
// link token in the path is never logged.
func routeName(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " (unrouted)"
}

func (h *Handler) notFoundPage(_ http.ResponseWriter, _ *http.Request, _ *session) error {
	return errNotFound
}

// static serves the embedded stylesheet.
func (h *Handler) static() http.Handler {
	sub, _ := fs.Sub(assets, "static")
	files := http.StripPrefix("/portal/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.headers(w)
		if strings.HasSuffix(r.URL.Path, "/") {
			h.fail(w, r, errNotFound) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// formatTime renders a time in UTC, ISO 8601 with its zone: the machine
// form of a time (<time datetime>, form values); people read view.When.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// formatDuration renders a duration the short way: 30s, 2m, 1h30m, 3d.
func formatDuration(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String() // "1h30m0s", "2m0s", "10s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func pct(num, den int64) string {
	if den == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", float64(num)*100/float64(den))
}

// stateTag is the CSS class of a delivery or endpoint state.
func stateTag(s string) string {
	switch s {
	case "delivered", "active", "done", "2xx":
		return "ok"
	case "dead", "disabled", "failed", "gone", "permanent", "refused", "5xx", "4xx", "timeout", "dns", "tls":
		return "bad"
	case "retrying", "failing", "running", "interrupted", "retry", "circuit_open", "deferred", "unknown":
		return "warn"
	}
	return "muted"
}

// plainText returns what is wrong with s as a text value, or "".
func plainText(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return fmt.Sprintf("must not contain NUL or other control characters (found %U)", r)
		}
	}
	return ""
}

func clip(s string) string { return clipN(s, 100) }

func clipN(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// testType is the test event type offered for an endpoint: its first
// subscribed type without a wildcard, or "hookd.test".
func testType(types []string) string {
	for _, t := range types {
		if !strings.Contains(t, "*") {
			return t
		}
	}
	for _, t := range types {
		if t != "*" {
			return strings.ReplaceAll(t, "*", "test")
		}
	}
	return "hookd.test"
}

// latency shows a median duration; under a millisecond when attempts were
// made, a dash when none were.
func latency(st store.EndpointStats) string {
	switch {
	case st.Delivered+st.Failed == 0:
		return "—"
	case st.P50 < time.Millisecond:
		return "< 1 ms"
	}
	return fmt.Sprintf("%d ms", st.P50.Milliseconds())
}

// stateLabel names a delivery state for people.
func stateLabel(s string) string {
	if s == "dead" {
		return "dead-lettered"
	}
	return s
}

// tierName shortens a tier topic ("webhooks.retry.2m" to "retry 2m").
func tierName(topic string) string {
	if i := strings.LastIndex(topic, ".retry."); i >= 0 {
		return "retry " + topic[i+len(".retry."):]
	}
	if i := strings.LastIndexByte(topic, '.'); i >= 0 {
		return topic[i+1:]
	}
	return topic
}
