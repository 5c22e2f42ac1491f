package portal

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/hookd/hookd/store"
)

func (h *Handler) routes() []route {
	return []route{
		{pattern: "GET /portal/{$}", public: true, handle: (*Handler).home},
		{pattern: "GET /portal/login/{token}", public: true, handle: (*Handler).linkPage},
		{pattern: "POST /portal/login", public: true, handle: (*Handler).useLink},
		{pattern: "GET /portal/signed-out", public: true, handle: (*Handler).signedOut},
		{pattern: "POST /portal/logout", handle: (*Handler).logout},
		{pattern: "GET /portal/support/login", public: true, handle: (*Handler).supportLoginPage},
		{pattern: "POST /portal/support/login", public: true, handle: (*Handler).supportLogin},
		{pattern: "GET /portal/support", handle: (*Handler).supportPage},
		{pattern: "POST /portal/support/act", handle: (*Handler).supportAct},
		{pattern: "GET /portal/endpoints/{id}", account: true, handle: (*Handler).endpointPage},
		{pattern: "POST /portal/endpoints/{id}/settings", account: true, manage: true, handle: (*Handler).endpointSettings},
		{pattern: "POST /portal/endpoints/{id}/status", account: true, manage: true, handle: (*Handler).endpointStatus},
		{pattern: "POST /portal/endpoints/{id}/rotate", account: true, manage: true, handle: (*Handler).endpointRotate},
		{pattern: "POST /portal/endpoints/{id}/test", account: true, manage: true, handle: (*Handler).endpointTest},
		{pattern: "POST /portal/endpoints/{id}/recover", account: true, manage: true, handle: (*Handler).endpointRecover},
		{pattern: "POST /portal/endpoints", account: true, manage: true, handle: (*Handler).endpointCreate},
		{pattern: "POST /portal/endpoints/{id}/delete", account: true, manage: true, handle: (*Handler).endpointDelete},
		{pattern: "GET /portal/deliveries", account: true, handle: (*Handler).deliveriesPage},
		{pattern: "GET /portal/deliveries/{id}", account: true, handle: (*Handler).deliveryPage},
		{pattern: "POST /portal/deliveries/{id}/replay", account: true, manage: true, handle: (*Handler).deliveryReplay},
		{pattern: "POST /portal/deliveries/{id}/resend", account: true, manage: true, handle: (*Handler).deliveryResend},
		{pattern: "GET /portal/replays", handle: (*Handler).replaysPage},
		{pattern: "GET /portal/policy", handle: (*Handler).policyPage},
		{pattern: "GET /portal/event-types", handle: (*Handler).catalogPage},
	}
}

// home is the endpoints page of a signed-in account, the search page of a
// support session, or the sign-in explanation.
func (h *Handler) home(w http.ResponseWriter, r *http.Request, _ *session) error {
	s, err := h.loadSession(r, true)
	switch {
	case errors.Is(err, errNoSession) || errors.Is(err, errEnded):
		return h.render(w, r, http.StatusOK, "welcome", view{Title: "Delivery portal", Data: errors.Is(err, errEnded)})
	case err != nil:
		return err
	case s.Account == "":
		http.Redirect(w, r, "/portal/support", http.StatusSeeOther)
		return nil
	}
	return h.endpointsPage(w, r, s)
}

// linkProblem is the page of a link that cannot be used.
func (h *Handler) linkProblem(w http.ResponseWriter, r *http.Request, err error) error {
	p := problem{SignIn: true}
	status := http.StatusGone
	switch {
	case errors.Is(err, store.ErrLinkUsed):
		p.Heading, p.Text = "This link was already used", "Portal links work once: this one opened a session already, maybe in another browser or tab."
	case errors.Is(err, store.ErrLinkExpired):
		p.Heading, p.Text = "This link has expired", "Portal links are short-lived for your safety."
	case errors.Is(err, store.ErrNotFound):
		status = http.StatusNotFound
		p.Heading, p.Text = "This link is not valid", "The address is incomplete or was never issued."
	default:
		return err
	}
	p.Hint = "Go back to the settings page that sent you here and open the portal again, or ask " + h.cfg.Name +
		" support for a new link. If you are still signed in in this browser, the portal home works without a link."
	return h.render(w, r, status, "problem", view{Title: p.Heading, Data: p})
}

// validLinkToken reports whether s looks like a link token, so that junk
// never reaches the database.
func validLinkToken(s string) bool {
	return strings.HasPrefix(s, "hpl_") && len(s) == 47 && strings.Trim(s[4:],
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
}

// linkPage shows only a Continue button: mail and chat scanners fetch
// links, and must not use them up.
func (h *Handler) linkPage(w http.ResponseWriter, r *http.Request, _ *session) error {
	token := r.PathValue("token")
	if !validLinkToken(token) {
		return h.linkProblem(w, r, store.ErrNotFound)
	}
	l, err := h.store().PortalLinkByToken(r.Context(), token)
	switch {
	case err != nil:
		return h.linkProblem(w, r, err)
	case l.UsedAt != nil:
		return h.linkProblem(w, r, store.ErrLinkUsed)
	case !l.ExpiresAt.After(h.now()):
		return h.linkProblem(w, r, store.ErrLinkExpired)
	}
	return h.render(w, r, http.StatusOK, "continue", view{Title: "Open the delivery portal", LoginCSRF: h.loginToken(w, r),
		Data: struct {
			Token string
			Link  store.PortalLink
		}{token, l}})
}

// useLink exchanges a link for a session cookie, then sends the browser
// to a URL without the token.
func (h *Handler) useLink(w http.ResponseWriter, r *http.Request, _ *session) error {
	if !h.checkLoginToken(r) {
		return errCSRF
	}
	token := r.PostFormValue("token")
	if !validLinkToken(token) {
		return h.linkProblem(w, r, store.ErrNotFound)
	}
	ps, cookie, err := h.store().OpenPortalSession(r.Context(), token)
	if err != nil {
		return h.linkProblem(w, r, err)
	}
	h.setCookie(w, r, sessionCookie, cookie, int(h.cfg.SessionMax/time.Second))
	h.setCookie(w, r, loginCookie, "", 0)
	s := &session{PortalSession: ps}
	h.audit(r.Context(), s, "sign-in", ps.LinkID, "level "+ps.Level)
	h.prune(r.Context())
	to := "/portal/"
	if ps.EndpointID != "" {
		to = "/portal/endpoints/" + ps.EndpointID
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := h.store().RevokePortalSession(r.Context(), s.ID); err != nil {
		return err
	}
	h.setCookie(w, r, sessionCookie, "", 0)
	h.audit(r.Context(), s, "sign-out", s.ID, "")
	http.Redirect(w, r, "/portal/signed-out", http.StatusSeeOther)
	return nil
}

func (h *Handler) signedOut(w http.ResponseWriter, r *http.Request, _ *session) error {
	return h.render(w, r, http.StatusOK, "problem", view{Title: "Signed out", Data: problem{Heading: "You are signed out",
		Text: "Your portal session has ended in this browser.", Hint: "Open a new portal link to come back.", SignIn: true}})
}

func (h *Handler) supportLoginPage(w http.ResponseWriter, r *http.Request, _ *session) error {
	if h.cfg.AdminToken == "" {
		return errNotFound
	}
	return h.render(w, r, http.StatusOK, "support_login", view{Title: "Support sign-in", LoginCSRF: h.loginToken(w, r)})
}

// supportLogin signs support staff in with the admin token, posted in the
// form body (never a URL).
func (h *Handler) supportLogin(w http.ResponseWriter, r *http.Request, _ *session) error {
	if h.cfg.AdminToken == "" {
		return errNotFound
	}
	if !h.checkLoginToken(r) {
		return errCSRF
	}
	got := sha256.Sum256([]byte(r.PostFormValue("token")))
	want := sha256.Sum256([]byte(h.cfg.AdminToken))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		h.logger.WarnContext(r.Context(), "portal support sign-in refused: wrong admin token")
		return h.render(w, r, http.StatusUnauthorized, "support_login", view{Title: "Support sign-in", LoginCSRF: h.loginToken(w, r),
			Notice: &notice{Error: true, Text: "That is not the admin token. Nothing was signed in."}})
	}
	ps, cookie, err := h.store().OpenSupportSession(r.Context())
	if err != nil {
		return err
	}
	h.setCookie(w, r, sessionCookie, cookie, int(h.cfg.SessionMax/time.Second))
	h.setCookie(w, r, loginCookie, "", 0)
	h.audit(r.Context(), &session{PortalSession: ps}, "support sign-in", ps.ID, "")
	http.Redirect(w, r, "/portal/support", http.StatusSeeOther)
	return nil
}

// prune deletes, at each sign-in, the links and sessions that ended more
// than a day ago: they open nothing any more.
func (h *Handler) prune(ctx context.Context) {
	before := h.now().Add(-h.cfg.SessionMax - 24*time.Hour)
	if n, err := h.store().PrunePortal(ctx, before); err != nil {
		h.logger.WarnContext(ctx, "portal: pruning old links and sessions", "error", err)
	} else if n > 0 {
		h.logger.DebugContext(ctx, "portal: pruned old links and sessions", "rows", n)
	}
}
