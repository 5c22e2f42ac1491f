package portal

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// supportPage finds an account, endpoint, delivery or event id across
// accounts (support sessions only).
func (h *Handler) supportPage(w http.ResponseWriter, r *http.Request, s *session) error {
	if !s.Support() {
		return errNotFound
	}
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	var hits []store.PortalSearchHit
	if q != "" {
		if err := endpoint.ValidateID(q); err != nil {
			return badInput("search: ids and account names are 1..255 printable characters without spaces")
		}
		var err error
		if hits, err = h.store().PortalSearch(r.Context(), q); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, "support", view{Title: "Support", Nav: "support", S: s, Data: struct {
		Q    string
		Hits []store.PortalSearchHit
	}{q, hits}})
}

// supportAct makes a support session act on behalf of an account (and
// then go to one of its pages), or of none.
func (h *Handler) supportAct(w http.ResponseWriter, r *http.Request, s *session) error {
	if !s.Support() {
		return errNotFound
	}
	account := r.PostFormValue("account")
	if account != "" {
		if err := endpoint.ValidateAccount(account); err != nil {
			return badInput("account: 1..255 printable characters without spaces")
		}
	}
	if err := h.store().SetPortalSessionAccount(r.Context(), s.ID, account); err != nil {
		return err
	}
	s.Account = account
	h.audit(r.Context(), s, "support acts for account", account, "")
	to := "/portal/support"
	if account != "" {
		to = "/portal/"
		if next, ok := safeNext(r.PostFormValue("next")); ok {
			to = next
		}
	}
	if account != "" {
		// The support banner on every page says on whose behalf and how it
		// is recorded: a notice saying it again was a second, identical banner.
		http.Redirect(w, r, to, http.StatusSeeOther)
		return nil
	}
	return h.redirect(w, r, s, to, notice{Text: "You no longer act on behalf of an account."})
}

// safeNext returns next as a path of the portal to redirect to, or false.
// A prefix check alone is not enough: http.Redirect cleans the path, so
// "/portal/../\evil.example" becomes "/\evil.example", which browsers
// read as "//evil.example", another site. So next must parse as a path
// alone (no scheme, host or "//"), hold no backslash or control character
// (raw or percent-encoded), and still be under /portal/ once its dot
// segments (raw or encoded) are resolved; the cleaned path is returned,
// escaped again, with next's query.
func safeNext(next string) (string, bool) {
	if next == "" || len(next) > 2048 || strings.HasPrefix(next, "//") || badNextText(next) {
		return "", false
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" || u.Fragment != "" ||
		!strings.HasPrefix(u.Path, "/") {
		return "", false
	}
	if badNextText(u.Path) {
		return "", false
	}
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if clean != "/portal" && !strings.HasPrefix(clean, "/portal/") {
		return "", false
	}
	return (&url.URL{Path: clean, RawQuery: u.RawQuery}).String(), true
}

// badNextText reports a backslash (browsers read it as '/'), a control
// character or invalid UTF-8.
func badNextText(s string) bool {
	return !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r == '\\' || r < ' ' || r == 0x7f })
}
