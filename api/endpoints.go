package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// endpointOut is an endpoint as the API shows it: secrets masked, except
// the new one right after create.
type endpointOut struct {
	ID          string   `json:"id"`
	Account     string   `json:"account"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	Status      string   `json:"status"`
	MaxInFlight int      `json:"max_in_flight,omitempty"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	RatePerSec  float64  `json:"rate_per_sec,omitempty"`
	// Headers is always an object, {} when the endpoint has none.
	Headers map[string]string `json:"headers"`
	// Filter is the payload filter; left out when none.
	Filter  json.RawMessage `json:"filter,omitempty"`
	Secrets []string        `json:"secrets"`
	Secret  string          `json:"secret,omitempty"`
	// SignatureScheme is the current key's: hmac-sha256 or ed25519.
	SignatureScheme string `json:"signature_scheme"`
	// PublicKeys are the whpk_ keys of the ed25519 keys, current first.
	PublicKeys []string `json:"public_keys,omitempty"`
	// ClientCertSubject and ClientCertExpiresAt describe the client
	// certificate (mutual TLS); left out when none. Its key is never shown.
	ClientCertSubject   string     `json:"client_cert_subject,omitempty"`
	ClientCertExpiresAt *time.Time `json:"client_cert_expires_at,omitempty"`
	FailingSince        *time.Time `json:"failing_since,omitempty"`
	DisabledReason      string     `json:"disabled_reason,omitempty"`
	CreatedAt           time.Time  `json:"created_at"`
	UpdatedAt           time.Time  `json:"updated_at"`

	// SendTraceparent: each request carries its attempt span's traceparent.
	SendTraceparent bool `json:"send_traceparent"`
	// Ordering is none or fifo, always shown.
	Ordering string `json:"ordering"`
}

func endpointView(e endpoint.Endpoint) endpointOut {
	out := endpointOut{ID: e.ID, Account: e.Account, URL: e.URL, Description: e.Description, EventTypes: e.EventTypes,
		Status: string(e.Status), MaxInFlight: e.MaxInFlight, TimeoutMS: e.Timeout.Milliseconds(), RatePerSec: e.RatePerSec,
		DisabledReason: e.DisabledReason, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, Headers: e.Headers,
		Filter: e.Filter, SendTraceparent: e.SendTraceparent}
	out.Ordering = string(endpoint.OrderingOf(e.Ordering))
	if out.EventTypes == nil {
		out.EventTypes = []string{}
	}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	for _, sec := range e.Secrets {
		out.Secrets = append(out.Secrets, endpoint.MaskSecret(sec))
	}
	out.SignatureScheme, out.PublicKeys = endpoint.SchemeHMAC, e.PublicKeys()
	if len(e.Secrets) > 0 {
		out.SignatureScheme = endpoint.SchemeOf(e.Secrets[0])
	}
	if !e.FailingSince.IsZero() {
		t := e.FailingSince
		out.FailingSince = &t
	}
	if info, ok := e.ClientCertInfo(); ok {
		out.ClientCertSubject, out.ClientCertExpiresAt = info.Subject, &info.NotAfter
	}
	return out
}

type endpointIn struct {
	ID          string   `json:"id"`
	Account     string   `json:"account"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	Secret      string   `json:"secret"`
	// SignatureScheme picks the generated key's kind when Secret is empty.
	SignatureScheme string            `json:"signature_scheme"`
	MaxInFlight     int               `json:"max_in_flight"`
	TimeoutMS       int64             `json:"timeout_ms"`
	RatePerSec      float64           `json:"rate_per_sec"`
	Headers         map[string]string `json:"headers"`
	Filter          json.RawMessage   `json:"filter"`
	// ClientCert and ClientKey are a PEM client certificate and key for
	// mutual TLS.
	ClientCert string `json:"client_cert"`
	ClientKey  string `json:"client_key"`

	SendTraceparent bool `json:"send_traceparent"`
	// Ordering is none (the default) or fifo.
	Ordering string `json:"ordering"`
}

func (s *V1) createEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	var in endpointIn
	if !decode(w, r, &in) {
		return
	}
	if msg := s.createProblem(c, &in); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	e := endpoint.Endpoint{ID: in.ID, Account: in.Account, URL: in.URL, Description: in.Description, EventTypes: in.EventTypes,
		Status: endpoint.StatusActive, MaxInFlight: in.MaxInFlight, Timeout: time.Duration(in.TimeoutMS) * time.Millisecond,
		RatePerSec: in.RatePerSec, Headers: in.Headers, Filter: endpoint.NormalizeFilter(in.Filter),
		ClientCert: in.ClientCert, ClientKey: in.ClientKey, SendTraceparent: in.SendTraceparent}
	e.Ordering = endpoint.Ordering(in.Ordering)
	if err := endpoint.ValidateOrdering(e.Ordering); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	if _, err := endpoint.ParseClientCert(e.ClientCert, e.ClientKey, time.Now()); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	if e.ID == "" {
		e.ID = endpoint.NewID()
	}
	secret := in.Secret
	if secret == "" {
		var err error
		if secret, err = endpoint.NewSigningKey(in.SignatureScheme); err != nil {
			writeError(w, http.StatusBadRequest, "invalid", err.Error())
			return
		}
	} else if in.SignatureScheme != "" && in.SignatureScheme != endpoint.SchemeOf(secret) {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("signature_scheme: %s contradicts the secret given (a %s key)",
			in.SignatureScheme, endpoint.SchemeOf(secret)))
		return
	}
	e.Secrets = []string{secret}
	if err := CheckNewEndpoint(r.Context(), s.resolver, s.cfg.AllowPrivateNetworks, &e); err != nil {
		msg := err.Error()
		if errors.Is(err, ssrf.ErrRefused) {
			msg += "; hookd refuses private destinations unless started with --allow-private-networks"
		}
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	out, err := be.Store.CreateEndpoint(r.Context(), e)
	switch {
	case errors.Is(err, endpoint.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, store.ErrAlreadyExists):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case err != nil:
		s.internal(w, r, err)
	default:
		v := endpointView(out)
		if !endpoint.IsPrivateKey(secret) {
			// A shared secret is shown once; a private key never is: the
			// receiver verifies with the public key.
			v.Secret = secret
		}
		w.Header().Set("Location", "/v1/endpoints/"+url.PathEscape(out.ID))
		writeJSON(w, http.StatusCreated, v)
	}
}

// createProblem checks what the caller may set on a new endpoint and fills
// an account token's account in; it returns the 400 message or "".
func (s *V1) createProblem(c caller, in *endpointIn) string {
	switch {
	case !c.admin && in.Account != "" && in.Account != c.account:
		return fmt.Sprintf("account: this token can only create endpoints of account %s", c.account)
	case !c.admin && in.ID != "":
		// Ids are global: letting accounts choose them would tell one
		// account which ids another one uses (409 vs 201).
		return "id: only the admin token chooses endpoint ids; omit it and hookd assigns one"
	case !c.admin:
		in.Account = c.account
	case in.Account == "":
		return "account: required with the admin token"
	}
	return s.limitsProblem(&in.MaxInFlight, &in.TimeoutMS, &in.RatePerSec)
}

// limitsProblem checks the per-endpoint limits given (nil: not given)
// against this hookd's ceilings; it returns the 400 message or "".
func (s *V1) limitsProblem(maxInFlight *int, timeoutMS *int64, rate *float64) string {
	switch {
	case maxInFlight != nil && (*maxInFlight < 0 || *maxInFlight > s.cfg.MaxEndpointInFlight):
		return fmt.Sprintf("max_in_flight: must be 0 (hookd's default) to %d (this hookd's --max-endpoint-in-flight), got %d",
			s.cfg.MaxEndpointInFlight, *maxInFlight)
	case timeoutMS != nil && (*timeoutMS < 0 || *timeoutMS > s.cfg.MaxTimeout.Milliseconds()):
		return fmt.Sprintf("timeout_ms: must be 0 (hookd's default) to %d (this hookd's request timeout, %s), got %d",
			s.cfg.MaxTimeout.Milliseconds(), s.cfg.MaxTimeout, *timeoutMS)
	case rate != nil && (math.IsNaN(*rate) || *rate < 0 || *rate > endpoint.RatePerSecBound):
		return fmt.Sprintf("rate_per_sec: must be 0 (unlimited) to %g, got %g", endpoint.RatePerSecBound, *rate)
	}
	return ""
}

// checkDestination refuses, with a 400, a URL whose host is or resolves
// to a private or otherwise special-purpose address, unless the API
// allows private networks. A failed DNS lookup is accepted (see
// ssrf.CheckURL): the dispatcher's dial-time guard still applies.
func (s *V1) checkDestination(w http.ResponseWriter, r *http.Request, rawURL string) bool {
	if s.cfg.AllowPrivateNetworks {
		return true
	}
	err := ssrf.CheckURL(r.Context(), s.resolver, rawURL)
	switch {
	case errors.Is(err, ssrf.ErrRefused):
		writeError(w, http.StatusBadRequest, "invalid",
			"url: "+err.Error()+"; hookd refuses private destinations unless started with --allow-private-networks")
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, "invalid", "url: "+err.Error())
		return false
	}
	return true
}

func (s *V1) listEndpoints(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	account := r.URL.Query().Get("account")
	if !c.admin {
		if account != "" && account != c.account {
			writeError(w, http.StatusBadRequest, "invalid", "account: this token sees only account "+c.account)
			return
		}
		account = c.account
	}
	status := r.URL.Query().Get("status")
	if status != "" && status != "active" && status != "disabled" {
		writeError(w, http.StatusBadRequest, "invalid", "status: must be active or disabled")
		return
	}
	limit, ok := s.limit(w, r, 100)
	if !ok {
		return
	}
	eps, err := be.Store.ListEndpoints(r.Context(), store.ListEndpointsParams{Account: account, Status: endpoint.Status(status), Limit: limit})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := make([]endpointOut, 0, len(eps))
	for _, e := range eps {
		out = append(out, endpointView(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
}

// ownEndpoint loads the endpoint of the path, answering 404 when it does
// not exist or belongs to another account.
func (s *V1) ownEndpoint(w http.ResponseWriter, r *http.Request, c caller) (endpoint.Endpoint, bool) {
	be, _ := s.backend()
	id := r.PathValue("id")
	e, err := be.Store.GetEndpoint(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.owns(e.Account)) {
		writeError(w, http.StatusNotFound, "not_found", "endpoint "+id+" not found")
		return e, false
	}
	if err != nil {
		s.internal(w, r, err)
		return e, false
	}
	return e, true
}

func (s *V1) getEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
	if e, ok := s.ownEndpoint(w, r, c); ok {
		writeJSON(w, http.StatusOK, endpointView(e))
	}
}

type endpointPatch struct {
	URL         *string   `json:"url"`
	Description *string   `json:"description"`
	EventTypes  *[]string `json:"event_types"`
	Status      *string   `json:"status"`
	MaxInFlight *int      `json:"max_in_flight"`
	TimeoutMS   *int64    `json:"timeout_ms"`
	RatePerSec  *float64  `json:"rate_per_sec"`
	// Headers replaces every custom header; {} removes them all.
	Headers *map[string]string `json:"headers"`
	// Filter replaces the payload filter; null or {} removes it. Absent
	// (nil) leaves it.
	Filter json.RawMessage `json:"filter"`
	// ClientCert and ClientKey replace the client certificate, both
	// together; both "" remove it.
	ClientCert *string `json:"client_cert"`
	ClientKey  *string `json:"client_key"`

	SendTraceparent *bool `json:"send_traceparent"`
	// Ordering replaces the ordering: none or fifo.
	Ordering *string `json:"ordering"`
}

func (s *V1) updateEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	if _, ok := s.ownEndpoint(w, r, c); !ok {
		return
	}
	var p endpointPatch
	if !decode(w, r, &p) {
		return
	}
	if msg := s.patchProblem(&p); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid", msg)
		return
	}
	if p.URL != nil && !s.checkDestination(w, r, *p.URL) {
		return
	}
	out, err := be.Store.ModifyEndpoint(r.Context(), r.PathValue("id"), func(e *endpoint.Endpoint) error {
		p.apply(e, c)
		return nil
	})
	switch {
	case errors.Is(err, endpoint.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "endpoint "+r.PathValue("id")+" not found")
	case err != nil:
		s.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, endpointView(out))
	}
}

// patchProblem checks the fields of a patch that can be checked alone
// and normalises its URL (endpoint.NormalizeURL); the store validates the
// patched endpoint as a whole. It returns the 400 message or "".
func (s *V1) patchProblem(p *endpointPatch) string {
	if p.Status != nil && *p.Status != "active" && *p.Status != "disabled" {
		return "status: must be active or disabled"
	}
	if p.URL != nil {
		norm, err := endpoint.NormalizeURL(*p.URL)
		if err != nil {
			return err.Error()
		}
		*p.URL = norm // the host as a client dials it, checked and stored
	}
	if p.EventTypes != nil {
		if len(*p.EventTypes) > endpoint.MaxEventTypes {
			return fmt.Sprintf("event_types: at most %d, got %d", endpoint.MaxEventTypes, len(*p.EventTypes))
		}
		for _, pat := range *p.EventTypes {
			if err := endpoint.ValidatePattern(pat); err != nil {
				return err.Error()
			}
		}
	}
	if p.Headers != nil {
		if err := endpoint.ValidateHeaders(*p.Headers); err != nil {
			return err.Error()
		}
	}
	if _, err := endpoint.ParseFilter(p.Filter); err != nil {
		return err.Error()
	}
	if p.Ordering != nil {
		o := endpoint.Ordering(*p.Ordering)
		if o == "" {
			o = "(empty)" // "" is the default only when absent
		}
		if err := endpoint.ValidateOrdering(o); err != nil {
			return err.Error()
		}
	}
	if p.ClientCert != nil || p.ClientKey != nil {
		if p.ClientCert == nil || p.ClientKey == nil {
			return `client_cert, client_key: give both (or both "" to remove the certificate)`
		}
		if _, err := endpoint.ParseClientCert(*p.ClientCert, *p.ClientKey, time.Now()); err != nil {
			return err.Error()
		}
	}
	return s.limitsProblem(p.MaxInFlight, p.TimeoutMS, p.RatePerSec)
}

// apply changes e as the patch says.
func (p *endpointPatch) apply(e *endpoint.Endpoint, c caller) {
	if p.URL != nil {
		e.URL = *p.URL
	}
	if p.Description != nil {
		e.Description = *p.Description
	}
	if p.EventTypes != nil {
		e.EventTypes = *p.EventTypes
	}
	if p.MaxInFlight != nil {
		e.MaxInFlight = *p.MaxInFlight
	}
	if p.TimeoutMS != nil {
		e.Timeout = time.Duration(*p.TimeoutMS) * time.Millisecond
	}
	if p.RatePerSec != nil {
		e.RatePerSec = *p.RatePerSec
	}
	if p.Headers != nil {
		e.Headers = *p.Headers
	}
	if len(p.Filter) > 0 {
		e.Filter = endpoint.NormalizeFilter(p.Filter)
	}
	if p.ClientCert != nil && p.ClientKey != nil {
		e.ClientCert, e.ClientKey = *p.ClientCert, *p.ClientKey
	}
	if p.SendTraceparent != nil {
		e.SendTraceparent = *p.SendTraceparent
	}
	if p.Ordering != nil {
		e.Ordering = endpoint.Ordering(*p.Ordering)
	}
	if p.Status != nil && endpoint.Status(*p.Status) != e.Status {
		e.Status = endpoint.Status(*p.Status)
		if e.Status == endpoint.StatusDisabled {
			e.DisabledReason, e.DisabledAt = "disabled over the API by "+c.actor(""), time.Now()
		} else {
			e.DisabledReason, e.DisabledAt, e.FailingSince = "", time.Time{}, time.Time{}
		}
	}
}

func (s *V1) deleteEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	if _, ok := s.ownEndpoint(w, r, c); !ok {
		return
	}
	if err := be.Store.DeleteEndpoint(r.Context(), r.PathValue("id")); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.internal(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
