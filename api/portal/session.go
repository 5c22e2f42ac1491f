package portal

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/hookd/hookd/store"
)

// maxFormBytes caps a form body.
const maxFormBytes = 64 << 10

// route is one page or action.
type route struct {
	pattern string
	// public routes need no session (sign-in pages, the 404 page).
	public bool
	// manage actions need a manage link or a support session.
	manage bool
	// account pages need an account: a support session that acts for
	// none is sent to the search page.
	account bool
	handle  func(h *Handler, w http.ResponseWriter, r *http.Request, s *session) error
}

// session is the signed-in session of a request.
type session struct {
	store.PortalSession
	notice *notice
}

func (s *session) Support() bool { return s.Level == store.PortalSupport }

// canManage reports whether the session may change things.
func (s *session) CanManage() bool { return s.Level == store.PortalManage || s.Support() }

// actor names the session in audit rows: "support on behalf of acct_1", or
// "acct_1 via portal link pl_...".
func (s *session) Actor() string {
	if s.Support() {
		if s.Account == "" {
			return "support"
		}
		return "support on behalf of " + s.Account
	}
	return s.Account + " via portal link " + s.LinkID
}

// Errors a handler returns; wrap answers each with its page.
var (
	errNotFound  = errors.New("not found")
	errReadOnly  = errors.New("read-only")
	errNoSession = errors.New("no session")
	errEnded     = errors.New("session ended")
	errCSRF      = errors.New("csrf")
	errStarting  = errors.New("starting")
)

// wrap turns a route into a handler: security headers, the backend,
// the session, the origin and CSRF checks of a POST, the level checks,
// and the error pages.
func (h *Handler) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.headers(w)
		err := h.serve(w, r, rt)
		if err != nil {
			h.fail(w, r, err)
		}
	})
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rt route) error {
	if be, _ := h.backend(); be == nil {
		return errStarting
	}
	post := r.Method == http.MethodPost
	if post {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			return badInput("the form could not be read: %v", err)
		}
		if !h.sameOrigin(r) {
			return errCSRF
		}
		if msg := formText(r); msg != "" {
			return badInput("%s", msg)
		}
	}
	if rt.public {
		return rt.handle(h, w, r, nil)
	}
	s, err := h.loadSession(r, !post)
	if err != nil {
		return err
	}
	switch {
	case post && subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.CSRFToken)) != 1:
		return errCSRF
	case rt.manage && !s.CanManage():
		return errReadOnly
	case rt.account && s.Account == "":
		http.Redirect(w, r, "/portal/support", http.StatusSeeOther)
		return nil
	}
	return rt.handle(h, w, r, s)
}

// headers are on every portal answer.
func (h *Handler) headers(w http.ResponseWriter) {
	hd := w.Header()
	ancestors := "'none'"
	if len(h.cfg.FrameAncestors) > 0 {
		ancestors = strings.Join(h.cfg.FrameAncestors, " ")
	} else {
		hd.Set("X-Frame-Options", "DENY")
	}
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "+
		"base-uri 'none'; frame-ancestors "+ancestors)
	hd.Set("Cache-Control", "no-store")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// secure reports whether the portal is reached over https: by its base
// URL, or else by the request itself.
func (h *Handler) secure(r *http.Request) bool {
	if h.cfg.BaseURL != "" {
		return strings.HasPrefix(h.cfg.BaseURL, "https://")
	}
	return r.TLS != nil
}

// origin is the portal's own origin.
func (h *Handler) origin(r *http.Request) string {
	if h.cfg.BaseURL != "" {
		return h.cfg.BaseURL
	}
	if r.TLS != nil {
		return "https://" + strings.ToLower(r.Host)
	}
	return "http://" + strings.ToLower(r.Host)
}

// sameOrigin checks where a POST comes from: browsers send Sec-Fetch-Site
// (which must say same-origin) or an Origin header (which must be the
// portal's). A POST with neither (not from a browser, or with Origin
// "null", which Referrer-Policy: no-referrer makes some browsers send) is
// judged by its CSRF token alone.
func (h *Handler) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	o := r.Header.Get("Origin")
	return o == "" || o == "null" || strings.EqualFold(o, h.origin(r))
}

// formText refuses form values no field can hold.
func formText(r *http.Request) string {
	for name, vs := range r.PostForm {
		for _, v := range vs {
			if msg := plainText(v); msg != "" {
				return clip(name) + ": " + msg
			}
		}
	}
	return ""
}

// cookieName is the session cookie's name: __Host- prefixed over https.
func (h *Handler) cookieName(r *http.Request, base string) string {
	if h.secure(r) {
		return "__Host-" + base
	}
	return base
}

const (
	sessionCookie = "hookd_portal"
	loginCookie   = "hookd_portal_login"
)

// setCookie sets (or with value "", clears) a portal cookie.
func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, base, value string, maxAge int) {
	c := &http.Cookie{Name: h.cookieName(r, base), Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: h.secure(r), SameSite: http.SameSiteLaxMode}
	if value == "" {
		c.MaxAge = -1
	}
	if c.Secure && len(h.cfg.FrameAncestors) > 0 {
		c.SameSite, c.Partitioned = http.SameSiteNoneMode, true
	}
	http.SetCookie(w, c)
}

func (h *Handler) cookie(r *http.Request, base string) string {
	c, err := r.Cookie(h.cookieName(r, base))
	if err != nil {
		return ""
	}
	return c.Value
}

// loadSession reads the session of the request's cookie; takeFlash takes
// its one-time notice too (a page about to render).
func (h *Handler) loadSession(r *http.Request, takeFlash bool) (*session, error) {
	token := h.cookie(r, sessionCookie)
	if token == "" {
		return nil, errNoSession
	}
	be, _ := h.backend()
	ps, err := be.Store.PortalSessionByToken(r.Context(), token,
		store.SessionLimits{Idle: h.cfg.SessionIdle, Max: h.cfg.SessionMax}, takeFlash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errNoSession
	case errors.Is(err, store.ErrSessionEnded):
		return nil, errEnded
	case err != nil:
		return nil, err
	}
	s := &session{PortalSession: ps}
	if len(ps.Flash) > 0 {
		var n notice
		if json.Unmarshal(ps.Flash, &n) == nil {
			s.notice = &n
		}
	}
	return s, nil
}

// notice is a one-time message shown by the page after an action.
type notice struct {
	// Error marks a refusal rather than a success.
	Error bool   `json:"error,omitempty"`
	Text  string `json:"text"`
	// Secret is a new signing secret, shown this once.
	Secret string `json:"secret,omitempty"`
	// Link and LinkText offer a next step.
	Link     string `json:"link,omitempty"`
	LinkText string `json:"link_text,omitempty"`
}

// redirect answers an action: the notice for the next page, then 303.
func (h *Handler) redirect(w http.ResponseWriter, r *http.Request, s *session, to string, n notice) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if err := h.store().SetPortalFlash(r.Context(), s.ID, b); err != nil {
		return err
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

func (h *Handler) store() *store.Store {
	be, _ := h.backend()
	return be.Store
}

// loginToken returns the value of the sign-in forms' CSRF cookie, setting
// a fresh one when the browser has none: the sign-in forms carry it, as
// there is no session yet (double-submit).
func (h *Handler) loginToken(w http.ResponseWriter, r *http.Request) string {
	if v := h.cookie(r, loginCookie); len(v) == 43 {
		return v
	}
	v := newToken()
	h.setCookie(w, r, loginCookie, v, 3600)
	return v
}

// checkLoginToken checks a sign-in form's CSRF token against its cookie.
func (h *Handler) checkLoginToken(r *http.Request) bool {
	c := h.cookie(r, loginCookie)
	return c != "" && subtle.ConstantTimeCompare([]byte(c), []byte(r.PostFormValue("csrf"))) == 1
}

func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// audit records an action; a failure to record is logged, not shown: the
// action itself is done.
func (h *Handler) audit(ctx context.Context, s *session, action, target, detail string) {
	err := h.store().AddPortalAudit(ctx, store.PortalAuditEntry{Actor: s.Actor(), Account: s.Account,
		Action: action, Target: target, Detail: detail})
	if err != nil {
		h.logger.ErrorContext(ctx, "portal audit not recorded", "action", action, "target", target, "error", err)
	}
	h.logger.InfoContext(ctx, "portal action", "actor", s.Actor(), "action", action, "target", target, "session_id", s.ID)
}
