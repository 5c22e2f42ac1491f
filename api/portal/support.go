package portal

import (
	"net/http"
	"strings"

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
		if next := r.PostFormValue("next"); strings.HasPrefix(next, "/portal/") && !strings.HasPrefix(next, "//") {
			to = next
		}
	}
	text := "You are acting on behalf of " + account + "; what you do is recorded as \"support on behalf of " + account + "\"."
	if account == "" {
		text = "You no longer act on behalf of an account."
	}
	return h.redirect(w, r, s, to, notice{Text: text})
}
