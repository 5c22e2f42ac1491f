package api

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
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
	origin, msg := s.portalOrigin(r)
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
		out := portalLinkOut{PortalLink: l, Path: portalLoginPath + token}
		out.URL = origin + out.Path
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

// portalOrigin is the origin a link starts with: PortalBaseURL, or else
// the request's own address. Never a Host header as sent: anyone who can
// reach the API could then have hookd hand out links to a site of theirs
// (Host: evil.example), carrying a token. So without PortalBaseURL the
// Host must name the address the request reached (the listener's IP and
// port, or localhost on a loopback listener); otherwise the answer is the
// 400 message.
func (s *V1) portalOrigin(r *http.Request) (origin, msg string) {
	if s.cfg.PortalBaseURL != "" {
		return strings.TrimSuffix(s.cfg.PortalBaseURL, "/"), ""
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if hostIsLocalAddr(r) {
		return scheme + strings.ToLower(r.Host), ""
	}
	return "", fmt.Sprintf("url: hookd has no --portal-base-url (HOOKD_PORTAL_BASE_URL) and the request's Host %q is not "+
		"the address it listens on, so it cannot tell where people reach the portal; start hookd with "+
		"--portal-base-url set to the portal's public origin (https://hooks.example.com), or call it at its listen address",
		clip(r.Host))
}

// hostIsLocalAddr reports whether the request's Host is the address the
// connection reached (IP and port, the port implied by the scheme when
// absent), or localhost when that address is a loopback one.
func hostIsLocalAddr(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	la, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return false
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]"), "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	if port != strconv.Itoa(int(la.Port())) {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return la.Addr().IsLoopback()
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.Unmap() == la.Addr().Unmap()
}
