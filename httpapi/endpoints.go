package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookd/hookd/endpoint"
	"github.com/hookd/hookd/store"
)

// endpointOut is an endpoint as the API shows it: secrets masked, except
// the new one right after create.
type endpointOut struct {
	ID             string     `json:"id"`
	Account        string     `json:"account"`
	URL            string     `json:"url"`
	Description    string     `json:"description"`
	EventTypes     []string   `json:"event_types"`
	Status         string     `json:"status"`
	MaxInFlight    int        `json:"max_in_flight,omitempty"`
	TimeoutMS      int64      `json:"timeout_ms,omitempty"`
	RatePerSec     float64    `json:"rate_per_sec,omitempty"`
	Secrets        []string   `json:"secrets"`
	Secret         string     `json:"secret,omitempty"`
	FailingSince   *time.Time `json:"failing_since,omitempty"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func endpointView(e endpoint.Endpoint) endpointOut {
	out := endpointOut{ID: e.ID, Account: e.Account, URL: e.URL, Description: e.Description, EventTypes: e.EventTypes,
		Status: string(e.Status), MaxInFlight: e.MaxInFlight, TimeoutMS: e.Timeout.Milliseconds(), RatePerSec: e.RatePerSec,
		DisabledReason: e.DisabledReason, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
	if out.EventTypes == nil {
		out.EventTypes = []string{}
	}
	for _, sec := range e.Secrets {
		if len(sec) > 10 {
			sec = sec[:10]
		}
		out.Secrets = append(out.Secrets, sec+"****")
	}
	if !e.FailingSince.IsZero() {
		t := e.FailingSince
		out.FailingSince = &t
	}
	return out
}

// validatePattern is stricter than what the store accepts: event types
// are dot-separated words of letters, digits, '_' and '-', with '*'
// wildcards; "invoice..paid", "invoice." or "in voice" are refused.
func validatePattern(p string) error {
	if err := endpoint.ValidatePattern(p); err != nil {
		return err
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" {
			return fmt.Errorf("%w: event type %q: empty segment between dots", endpoint.ErrInvalid, p)
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*') {
				return fmt.Errorf("%w: event type %q: only letters, digits, '_', '-', '*' and '.' are allowed", endpoint.ErrInvalid, p)
			}
		}
	}
	return nil
}

type endpointIn struct {
	ID          string   `json:"id"`
	Account     string   `json:"account"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	Secret      string   `json:"secret"`
	MaxInFlight int      `json:"max_in_flight"`
	TimeoutMS   int64    `json:"timeout_ms"`
	RatePerSec  float64  `json:"rate_per_sec"`
}

func (s *Server) createEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	var in endpointIn
	if !decode(w, r, &in) {
		return
	}
	switch {
	case !c.admin && in.Account != "" && in.Account != c.account:
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("account: this token can only create endpoints of account %s", c.account))
		return
	case !c.admin:
		in.Account = c.account
	case in.Account == "":
		writeError(w, http.StatusBadRequest, "invalid", "account: required with the admin token")
		return
	}
	for _, p := range in.EventTypes {
		if err := validatePattern(p); err != nil {
			writeError(w, http.StatusBadRequest, "invalid", err.Error())
			return
		}
	}
	e := endpoint.Endpoint{ID: in.ID, Account: in.Account, URL: in.URL, Description: in.Description, EventTypes: in.EventTypes,
		Status: endpoint.StatusActive, MaxInFlight: in.MaxInFlight, Timeout: time.Duration(in.TimeoutMS) * time.Millisecond,
		RatePerSec: in.RatePerSec}
	if e.ID == "" {
		e.ID = endpoint.NewID()
	}
	secret := in.Secret
	if secret == "" {
		secret = endpoint.NewSecret()
	}
	e.Secrets = []string{secret}
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
		v.Secret = secret
		w.Header().Set("Location", "/v1/endpoints/"+out.ID)
		writeJSON(w, http.StatusCreated, v)
	}
}

func (s *Server) listEndpoints(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	account := r.URL.Query().Get("account")
	if !c.admin {
		if account != "" && account != c.account {
			writeJSON(w, http.StatusOK, map[string]any{"data": []endpointOut{}})
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
func (s *Server) ownEndpoint(w http.ResponseWriter, r *http.Request, c caller) (endpoint.Endpoint, bool) {
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

func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
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
}

func (s *Server) updateEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	if _, ok := s.ownEndpoint(w, r, c); !ok {
		return
	}
	var p endpointPatch
	if !decode(w, r, &p) {
		return
	}
	if p.EventTypes != nil {
		for _, pat := range *p.EventTypes {
			if err := validatePattern(pat); err != nil {
				writeError(w, http.StatusBadRequest, "invalid", err.Error())
				return
			}
		}
	}
	if p.Status != nil && *p.Status != "active" && *p.Status != "disabled" {
		writeError(w, http.StatusBadRequest, "invalid", "status: must be active or disabled")
		return
	}
	out, err := be.Store.ModifyEndpoint(r.Context(), r.PathValue("id"), func(e *endpoint.Endpoint) error {
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
		if p.Status != nil && endpoint.Status(*p.Status) != e.Status {
			e.Status = endpoint.Status(*p.Status)
			if e.Status == endpoint.StatusDisabled {
				e.DisabledReason, e.DisabledAt = "disabled over the API by "+c.actor(""), time.Now()
			} else {
				e.DisabledReason, e.DisabledAt, e.FailingSince = "", time.Time{}, time.Time{}
			}
		}
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

func (s *Server) deleteEndpoint(w http.ResponseWriter, r *http.Request, c caller) {
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
