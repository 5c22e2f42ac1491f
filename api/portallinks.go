package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// portalLoginPath is where a portal link opens (package portal serves it).
const portalLoginPath = "/portal/login/"

type portalLinkIn struct {
	Account  string `json:"account"`
	Endpoint string `json:"endpoint"`
	// TTL is a Go duration ("30m", "1h"); empty means store.PortalLinkTTL.
	TTL string `json:"ttl"`
	// Level is read (the default) or manage.
	Level string `json:"level"`
}

type portalLinkOut struct {
	store.PortalLink
	// URL is the link to hand to the person, shown once; Path is the same
	// without the origin, for a product that serves hookd's portal under
	// its own host name.
	URL  string `json:"url"`
	Path string `json:"path"`
}

// createPortalLink issues a one-time portal link for the caller's account
// (or, with the admin token, any account), optionally limited to one of
// its endpoints.
func (s *V1) createPortalLink(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	var in portalLinkIn
	if !decode(w, r, &in) {
		return
	}
	p, msg := portalLinkParams(c, in)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	l, token, err := be.Store.CreatePortalLink(r.Context(), p)
	switch {
	case errors.Is(err, store.ErrInvalidLink):
		writeError(w, http.StatusBadRequest, "invalid", strings.TrimPrefix(err.Error(), store.ErrInvalidLink.Error()+": "))
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "endpoint "+in.Endpoint+" not found")
	case err != nil:
		s.internal(w, r, err)
	default:
		scheme := "http://"
		if r.TLS != nil {
			scheme = "https://"
		}
		out := portalLinkOut{PortalLink: l, Path: portalLoginPath + token}
		out.URL = scheme + r.Host + out.Path
		writeJSON(w, http.StatusCreated, out)
	}
}

// portalLinkParams checks a link request; it returns the 400 message or "".
func portalLinkParams(c caller, in portalLinkIn) (store.CreatePortalLinkParams, string) {
	p := store.CreatePortalLinkParams{Account: in.Account, EndpointID: in.Endpoint, Level: in.Level, CreatedBy: c.actor("")}
	switch {
	case !c.admin && in.Account != "" && in.Account != c.account:
		return p, "account: this token can only create links of account " + c.account
	case !c.admin:
		p.Account = c.account
	case in.Account == "":
		return p, "account: required with the admin token"
	}
	if err := endpoint.ValidateAccount(p.Account); err != nil {
		return p, "account: 1..255 printable ASCII characters without spaces"
	}
	if p.EndpointID != "" && endpoint.ValidateID(p.EndpointID) != nil {
		return p, "endpoint: 1..255 printable ASCII characters without spaces"
	}
	if p.Level == "" {
		p.Level = store.PortalRead
	}
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		if err != nil || d < time.Minute || d > store.MaxPortalLinkTTL {
			return p, fmt.Sprintf("ttl: a duration from 1m to %s such as \"1h\", got %q", store.MaxPortalLinkTTL, clip(in.TTL))
		}
		p.TTL = d
	}
	return p, ""
}
