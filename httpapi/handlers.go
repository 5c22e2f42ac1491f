package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hookd/hookd/endpoint"
	"github.com/hookd/hookd/replay"
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

// limit reads the limit query parameter.
func (s *Server) limit(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > s.cfg.MaxListLimit {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("limit: must be 1..%d, got %q", s.cfg.MaxListLimit, v))
		return 0, false
	}
	return n, true
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	e, ok := s.ownEndpoint(w, r, c)
	if !ok {
		return
	}
	q := r.URL.Query()
	status := q.Get("status")
	switch status {
	case "", "pending", "retrying", "delivered", "dead":
	default:
		writeError(w, http.StatusBadRequest, "invalid", "status: must be pending, retrying, delivered or dead")
		return
	}
	var before time.Time
	if v := q.Get("before"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid", "before: must be an RFC 3339 time")
			return
		}
		before = t
	}
	limit, ok := s.limit(w, r, 50)
	if !ok {
		return
	}
	ds, err := be.Store.ListDeliveries(r.Context(), store.ListDeliveriesParams{EndpointID: e.ID, Status: status, Before: before, Limit: limit})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	resp := map[string]any{"data": ds}
	if len(ds) == limit {
		resp["next_before"] = ds[len(ds)-1].CreatedAt
	}
	writeJSON(w, http.StatusOK, resp)
}

type deliveryOut struct {
	store.Delivery
	Timeline []store.Attempt `json:"attempts_log"`
}

func (s *Server) timeline(ctx context.Context, d store.Delivery) (deliveryOut, error) {
	be, _ := s.backend()
	as, err := be.Store.AttemptsOfDelivery(ctx, d.ID, 0)
	return deliveryOut{Delivery: d, Timeline: as}, err
}

func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	id := r.PathValue("id")
	d, err := be.Store.GetDelivery(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.owns(d.Account)) {
		writeError(w, http.StatusNotFound, "not_found", "delivery "+id+" not found")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out, err := s.timeline(r.Context(), d)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) eventDeliveries(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	id := r.PathValue("id")
	ds, err := be.Store.DeliveriesOfEvent(r.Context(), id)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := []deliveryOut{}
	for _, d := range ds {
		if !c.owns(d.Account) {
			continue
		}
		t, err := s.timeline(r.Context(), d)
		if err != nil {
			s.internal(w, r, err)
			return
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		writeError(w, http.StatusNotFound, "not_found", "event "+id+" not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
}

// filterFrom reads dead-letter filters from the query string or a body.
type filterIn struct {
	Endpoint  string `json:"endpoint"`
	Account   string `json:"account"`
	EventType string `json:"event_type"`
	DLQReason string `json:"dlq_reason"`
	Since     string `json:"since"`
	Until     string `json:"until"`
}

func (f filterIn) resolve(c caller) (replay.Filter, error) {
	now := time.Now()
	since, err := replay.ParseTime(f.Since, now)
	if err != nil {
		return replay.Filter{}, fmt.Errorf("since: %w", err)
	}
	until, err := replay.ParseTime(f.Until, now)
	if err != nil {
		return replay.Filter{}, fmt.Errorf("until: %w", err)
	}
	out := replay.Filter{EndpointID: f.Endpoint, Account: f.Account, EventType: f.EventType, Reason: f.DLQReason, Since: since, Until: until}
	if !c.admin {
		if out.Account != "" && out.Account != c.account {
			return out, fmt.Errorf("account: this token sees only account %s", c.account)
		}
		out.Account = c.account
	}
	if out.EventType != "" {
		if err := validatePattern(out.EventType); err != nil {
			return out, err
		}
	}
	return out, out.Validate()
}

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	q := r.URL.Query()
	f, err := filterIn{Endpoint: q.Get("endpoint"), Account: q.Get("account"), EventType: q.Get("event_type"),
		DLQReason: q.Get("dlq_reason"), Since: q.Get("since"), Until: q.Get("until")}.resolve(c)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	limit, ok := s.limit(w, r, 100)
	if !ok {
		return
	}
	if f.EndpointID != "" {
		if _, ok := s.ownEndpoint(w, withID(r, f.EndpointID), c); !ok {
			return
		}
	}
	out := []replay.Entry{}
	_, err = replay.Scan(r.Context(), be.Replay, f, func(e replay.Entry) error {
		out = append(out, e)
		if len(out) >= limit {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out, "truncated": errors.Is(err, errEnough)})
}

var errEnough = errors.New("limit reached")

func withID(r *http.Request, id string) *http.Request {
	r2 := r.Clone(r.Context())
	r2.SetPathValue("id", id)
	return r2
}

type replayIn struct {
	ID     string   `json:"id"`
	Reason string   `json:"reason"`
	Actor  string   `json:"actor"`
	Filter filterIn `json:"filter"`
	Limit  int64    `json:"limit"`
	Rate   float64  `json:"rate"`
	Force  bool     `json:"force"`
	DryRun bool     `json:"dry_run"`
}

type resendIn struct {
	ID     string  `json:"id"`
	Since  string  `json:"since"`
	Until  string  `json:"until"`
	Reason string  `json:"reason"`
	Actor  string  `json:"actor"`
	Limit  int64   `json:"limit"`
	Rate   float64 `json:"rate"`
	Force  bool    `json:"force"`
	DryRun bool    `json:"dry_run"`
}

func (s *Server) createReplay(w http.ResponseWriter, r *http.Request, c caller) {
	var in replayIn
	if !decode(w, r, &in) {
		return
	}
	f, err := in.Filter.resolve(c)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	if f.EndpointID != "" {
		if _, ok := s.ownEndpoint(w, withID(r, f.EndpointID), c); !ok {
			return
		}
	}
	req := replay.Request{Kind: replay.KindDLQ, ID: in.ID, Actor: c.actor(in.Actor), Reason: in.Reason, Filter: f,
		SinceSpec: in.Filter.Since, UntilSpec: in.Filter.Until, Limit: in.Limit, Rate: in.Rate, Force: in.Force, DryRun: in.DryRun}
	s.startReplay(w, r, c, req)
}

func (s *Server) resend(w http.ResponseWriter, r *http.Request, c caller) {
	e, ok := s.ownEndpoint(w, r, c)
	if !ok {
		return
	}
	var in resendIn
	if !decode(w, r, &in) {
		return
	}
	if in.Since == "" {
		writeError(w, http.StatusBadRequest, "invalid", "since: required (RFC 3339 or a duration ago such as 24h)")
		return
	}
	f, err := filterIn{Endpoint: e.ID, Since: in.Since, Until: in.Until}.resolve(c)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	reason := in.Reason
	if reason == "" {
		reason = "resend to " + e.ID + " since " + in.Since
	}
	req := replay.Request{Kind: replay.KindResend, ID: in.ID, Actor: c.actor(in.Actor), Reason: reason, Filter: f,
		SinceSpec: in.Since, UntilSpec: in.Until, Limit: in.Limit, Rate: in.Rate, Force: in.Force, DryRun: in.DryRun}
	s.startReplay(w, r, c, req)
}

// startReplay answers a dry run at once (200 with the counts) and starts a
// real replay in the background (202 with its audit row, to poll at
// /v1/replays/{id}); a request already done answers 200 with its row.
func (s *Server) startReplay(w http.ResponseWriter, r *http.Request, c caller, req replay.Request) {
	be, baseCtx := s.backend()
	if !c.admin {
		req.Account = c.account
	}
	if err := replay.Check(r.Context(), be.Replay, &req); err != nil {
		switch {
		case errors.Is(err, replay.ErrEndpointNotFound):
			writeError(w, http.StatusNotFound, "not_found", err.Error())
		case errors.Is(err, replay.ErrEndpointDisabled):
			writeError(w, http.StatusConflict, "endpoint_disabled", err.Error())
		case errors.Is(err, replay.ErrInvalid):
			writeError(w, http.StatusBadRequest, "invalid", err.Error())
		default:
			s.internal(w, r, err)
		}
		return
	}
	if req.DryRun {
		res, err := replay.Run(r.Context(), be.Replay, req)
		if err != nil {
			s.internal(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	id := req.ID
	if id == "" {
		id = req.DerivedID()
	}
	if row, err := be.Store.GetReplay(r.Context(), id); err == nil {
		if !c.admin && row.Account != c.account {
			writeError(w, http.StatusConflict, "conflict", "replay id "+id+" is taken")
			return
		}
		if row.Status == store.ReplayDone {
			writeJSON(w, http.StatusOK, replay.Result{Replay: row, AlreadyDone: true})
			return
		}
	}
	s.runs.Go(func() {
		res, err := replay.Run(baseCtx, be.Replay, req)
		if err != nil {
			s.logger.WarnContext(baseCtx, "api replay stopped", "replay_id", id, "status", res.Status, "error", err)
			return
		}
		s.logger.InfoContext(baseCtx, "api replay finished", "replay_id", id, "replayed", res.Replayed, "skipped", res.Skipped)
	})
	w.Header().Set("Location", "/v1/replays/"+id)
	writeJSON(w, http.StatusAccepted, map[string]any{"id": id, "status": store.ReplayRunning, "location": "/v1/replays/" + id})
}

func (s *Server) listReplays(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	limit, ok := s.limit(w, r, 50)
	if !ok {
		return
	}
	p := store.ListReplaysParams{Limit: limit}
	if !c.admin {
		p.Account = c.account
	}
	rs, err := be.Store.ListReplays(r.Context(), p)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": rs})
}

func (s *Server) getReplay(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	id := r.PathValue("id")
	row, err := be.Store.GetReplay(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.admin && row.Account != c.account) {
		writeError(w, http.StatusNotFound, "not_found", "replay "+id+" not found")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, row)
}
