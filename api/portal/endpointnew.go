package portal

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// endpointCreate creates an endpoint of the session's account from the
// New endpoint form, under exactly the API's rules (api.CheckNewEndpoint:
// URL, SSRF, event types); its signing secret is shown once. A link bound
// to one endpoint cannot create others.
func (h *Handler) endpointCreate(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.EndpointID != "" {
		return badInput("this link is for one endpoint only; ask for a link to the whole account to create endpoints")
	}
	e := endpoint.Endpoint{ID: endpoint.NewID(), Account: s.Account, URL: strings.TrimSpace(r.PostFormValue("url")),
		Description: strings.TrimSpace(r.PostFormValue("description")), EventTypes: formTypes(r),
		Status: endpoint.StatusActive}
	if len(e.EventTypes) == 0 {
		// The API's message names its JSON field; this names the form's.
		return badInput("event types: tick at least one type, or enter one or a pattern (* for all); nothing was created")
	}
	secret := endpoint.NewSecret()
	e.Secrets = []string{secret}
	if err := api.CheckNewEndpoint(r.Context(), h.resolver, h.cfg.AllowPrivateNetworks, &e); err != nil {
		msg := strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": ")
		if errors.Is(err, ssrf.ErrRefused) {
			msg += "; private and internal destinations are refused"
		}
		return badInput("%s", msg)
	}
	out, err := h.store().CreateEndpoint(r.Context(), e)
	switch {
	case errors.Is(err, endpoint.ErrInvalid):
		return badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
	case err != nil:
		return err
	}
	h.audit(r.Context(), s, "endpoint created", out.ID, fmt.Sprintf("url %s; %d event type(s)", out.URL, len(out.EventTypes)))
	return h.redirect(w, r, s, "/portal/endpoints/"+out.ID, notice{Secret: secret,
		Text: "Endpoint created. Its signing secret is shown this once: copy it into your receiver now, to verify the webhook-signature header."})
}

// endpointDelete deletes an endpoint once the form's confirmation box is
// ticked. Its id is never reused; its deliveries stay in the log, and
// deliveries still on their way to it are dead-lettered.
func (h *Handler) endpointDelete(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.endpointFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	if r.PostFormValue("confirm") != "yes" {
		return h.redirect(w, r, s, "/portal/endpoints/"+e.ID, notice{Error: true,
			Text: "Tick the confirmation box to delete this endpoint. Nothing was deleted."})
	}
	if err := h.store().DeleteEndpoint(r.Context(), e.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	h.audit(r.Context(), s, "endpoint deleted", e.ID, "url "+e.URL)
	return h.redirect(w, r, s, "/portal/", notice{Text: "Endpoint " + e.URL + " (" + e.ID + ") deleted. Its deliveries stay in the delivery log; nothing more is sent to it."})
}
