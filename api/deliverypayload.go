package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/store"
)

// payloadOut is a delivery's payload as read from Kafka.
type payloadOut struct {
	DeliveryID string `json:"delivery_id"`
	// Source is "deliveries" (the delivery record) or "dead_letter".
	Source    string `json:"source"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Bytes     int    `json:"bytes"`
	SHA256    string `json:"sha256"`
	// Payload is the exact body sent, as JSON.
	Payload json.RawMessage `json:"payload"`
}

// ownDelivery loads the delivery named in the path if the caller may see
// it; another account's answers the same 404 as a missing one.
func (s *V1) ownDelivery(w http.ResponseWriter, r *http.Request, c caller) (store.Delivery, bool) {
	be, _ := s.backend()
	id := r.PathValue("id")
	d, err := be.Store.GetDelivery(r.Context(), c.scope(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.owns(d.Account)) {
		writeError(w, http.StatusNotFound, "not_found", "delivery "+id+" not found")
		return d, false
	}
	if err != nil {
		s.internal(w, r, err)
		return d, false
	}
	return d, true
}

func (s *V1) deliveryPayload(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	d, ok := s.ownDelivery(w, r, c)
	if !ok {
		return
	}
	p, err := replay.ReadPayload(r.Context(), be.Replay, d, 0)
	if err != nil {
		s.payloadError(w, r, err)
		return
	}
	out := payloadOut{DeliveryID: d.ID, Source: "deliveries", Topic: p.Record.Topic, Partition: p.Record.Partition,
		Offset: p.Record.Offset, Bytes: len(p.Record.Value), Payload: p.Record.Value}
	if p.DeadLetter {
		out.Source = "dead_letter"
	}
	if !json.Valid(out.Payload) {
		// Never the case for hookd's own records; still valid JSON out.
		out.Payload, _ = json.Marshal(string(p.Record.Value))
	}
	sum := sha256.Sum256(p.Record.Value)
	out.SHA256 = hex.EncodeToString(sum[:])
	writeJSON(w, http.StatusOK, out)
}

// payloadError answers why a payload cannot be read.
func (s *V1) payloadError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, replay.ErrPayloadExpired):
		writeError(w, http.StatusGone, "payload_expired", "the payload is no longer retained by Kafka: "+err.Error())
	case errors.Is(err, replay.ErrPayloadUnknown):
		writeError(w, http.StatusGone, "payload_unknown",
			"the delivery was logged before hookd recorded where its payload is kept; it cannot be read")
	case errors.Is(err, replay.ErrPayloadMismatch):
		writeError(w, http.StatusGone, "payload_unknown", "the record at the delivery's position is not its own")
	case errors.Is(err, replay.ErrPayloadUnavailable):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "payload_unavailable", "Kafka did not answer in time; try again")
	default:
		s.internal(w, r, err)
	}
}

type deliveryResendIn struct {
	Reason string `json:"reason"`
	Actor  string `json:"actor"`
	Force  bool   `json:"force"`
}

// resendDelivery sends one delivery again, whatever its state (201 with
// the audit row of kind delivery).
func (s *V1) resendDelivery(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	d, ok := s.ownDelivery(w, r, c)
	if !ok {
		return
	}
	var in deliveryResendIn
	if !decode(w, r, &in) {
		return
	}
	if in.Reason == "" {
		in.Reason = "resend of delivery " + d.ID
	}
	req := replay.DeliveryResend{DeliveryID: d.ID, Actor: c.actor(in.Actor), Reason: in.Reason, Force: in.Force}
	if !c.admin {
		req.Account = c.account
	}
	// A resend holds a replay slot while it runs (about a Kafka round
	// trip): one account cannot tie up the API's connections with them.
	who := c.account // "" for the admin token
	if !s.replays.acquire(who, s.cfg.MaxReplays, s.cfg.MaxReplaysPerAccount) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "too_many_replays", fmt.Sprintf(
			"too many replays and resends running: at most %d per account and %d in all; try again in a second",
			s.cfg.MaxReplaysPerAccount, s.cfg.MaxReplays))
		return
	}
	row, err := replay.ResendDelivery(r.Context(), be.Replay, req)
	s.replays.release(who)
	switch {
	case errors.Is(err, replay.ErrDeliveryNotFound):
		writeError(w, http.StatusNotFound, "not_found", "delivery "+d.ID+" not found")
	case errors.Is(err, replay.ErrEndpointNotFound):
		writeError(w, http.StatusConflict, "endpoint_deleted", err.Error())
	case errors.Is(err, replay.ErrEndpointDisabled):
		writeError(w, http.StatusConflict, "endpoint_disabled", err.Error())
	case errors.Is(err, replay.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, replay.ErrPayloadExpired), errors.Is(err, replay.ErrPayloadUnknown),
		errors.Is(err, replay.ErrPayloadMismatch), errors.Is(err, replay.ErrPayloadUnavailable):
		s.payloadError(w, r, err)
	case err != nil && row.ID != "":
		w.Header().Set("Location", "/v1/replays/"+url.PathEscape(row.ID))
		writeError(w, http.StatusServiceUnavailable, "resend_failed", "resend "+row.ID+" failed: "+row.Error)
	case err != nil:
		s.internal(w, r, err)
	default:
		w.Header().Set("Location", "/v1/replays/"+url.PathEscape(row.ID))
		writeJSON(w, http.StatusCreated, c.view(row))
	}
}
