package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hookd/hookd/store"
)

// limit reads the limit query parameter.
func (s *V1) limit(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
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

func (s *V1) listDeliveries(w http.ResponseWriter, r *http.Request, c caller) {
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
	// The endpoint's account, whoever asks: another account's rows under
	// the same endpoint id never list here.
	ds, err := be.Store.ListDeliveries(r.Context(), store.ListDeliveriesParams{EndpointID: e.ID, Account: e.Account,
		Status: status, Before: before, Limit: limit})
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

// scope is the account a delivery-log read is restricted to: the caller's,
// or every account for the admin token.
func (c caller) scope() string {
	if c.admin {
		return store.AnyAccount
	}
	return c.account
}

type deliveryOut struct {
	store.Delivery
	Timeline []store.Attempt `json:"attempts_log"`
}

// timeline adds the attempts of d's own account: attempts another
// account's records made under the same delivery id never show.
func (s *V1) timeline(ctx context.Context, d store.Delivery) (deliveryOut, error) {
	be, _ := s.backend()
	as, err := be.Store.AttemptsOfDelivery(ctx, d.Account, d.ID, 0)
	return deliveryOut{Delivery: d, Timeline: as}, err
}

func (s *V1) getDelivery(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	id := r.PathValue("id")
	d, err := be.Store.GetDelivery(r.Context(), c.scope(), id)
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

func (s *V1) eventDeliveries(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	id := r.PathValue("id")
	ds, err := be.Store.DeliveriesOfEvent(r.Context(), c.scope(), id)
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
