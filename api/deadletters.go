package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/endpoint"
)

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
		if err := endpoint.ValidatePattern(out.EventType); err != nil {
			return out, err
		}
	}
	return out, out.Validate()
}

// listDeadLetters answers GET /v1/dead-letters: the matching dead letters
// oldest first (the DLQ's partitions merged by dead-letter time), at most
// limit, "truncated" when more match.
func (s *V1) listDeadLetters(w http.ResponseWriter, r *http.Request, c caller) {
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
	_, err = replay.ScanByTime(r.Context(), be.Replay, f, func(e replay.Entry) error {
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
