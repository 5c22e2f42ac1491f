package portal

import (
	"net/http"
	"sync"
	"time"

	"github.com/hookd/hookd/store"
)

// replaysPage is the replay audit and the portal's activity log: who
// replayed, changed or tested what, and why. A support session that acts
// for no account sees every account's.
func (h *Handler) replaysPage(w http.ResponseWriter, r *http.Request, s *session) error {
	account := s.Account
	if s.Support() && account == "" {
		account = store.AnyAccount
	}
	rs, err := h.store().ListPortalReplays(r.Context(), account, s.EndpointID, 100)
	if err != nil {
		return err
	}
	// The operators' replays (hookctl, the admin token) that sent this
	// account's deliveries: only their count of its deliveries is shown.
	var byOperators []store.OperatorReplay
	if account != store.AnyAccount {
		if byOperators, err = h.store().ListOperatorReplays(r.Context(), account, s.EndpointID, 100); err != nil {
			return err
		}
	}
	var activity []store.PortalAuditEntry
	if s.EndpointID == "" {
		if activity, err = h.store().ListPortalAudit(r.Context(), account, 100); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, "replays", view{Title: "Replays", Nav: "replays", S: s, Data: struct {
		Replays     []store.Replay
		ByOperators []store.OperatorReplay
		Activity    []store.PortalAuditEntry
	}{rs, byOperators, activity}})
}

// tier is one row of the published retry schedule.
type tier struct {
	N     int
	Delay time.Duration
	// After is the time since the first attempt when it is due (before
	// jitter).
	After time.Duration
}

// policyPage publishes the retry schedule and the disable policy as this
// hookd runs them.
func (h *Handler) policyPage(w http.ResponseWriter, r *http.Request, s *session) error {
	var tiers []tier
	var total time.Duration
	for i, d := range h.cfg.Topics.Schedule {
		total += d
		tiers = append(tiers, tier{N: i + 2, Delay: d, After: total})
	}
	return h.render(w, r, http.StatusOK, "policy", view{Title: "Retry schedule and policies", Nav: "policy", S: s, Data: struct {
		Tiers            []tier
		Total            time.Duration
		DisableAfter     time.Duration
		RequestTimeout   time.Duration
		MaxInFlight      int
		DLQRetention     time.Duration
		Retention        time.Duration
		AttemptRetention time.Duration
		ReplayLimit      int64
		ReplayRate       float64
	}{tiers, total, h.cfg.DisableAfter, h.cfg.RequestTimeout, h.cfg.MaxInFlight, h.cfg.Topics.DLQRetention,
		h.cfg.Topics.Retention, h.cfg.AttemptRetention, h.cfg.ReplayLimit, h.cfg.ReplayRate}})
}

// ownSlots are the portal's replay slots when it runs without the API's
// (Deps.ReplaySlots): the same caps, counted in this process.
type ownSlots struct {
	mu              sync.Mutex
	max, perAccount int
	total           int
	byAccount       map[string]int
}

var _ ReplaySlots = (*ownSlots)(nil)

func (o *ownSlots) AcquireReplay(account string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.total >= o.max || o.byAccount[account] >= o.perAccount {
		return false
	}
	if o.byAccount == nil {
		o.byAccount = map[string]int{}
	}
	o.total++
	o.byAccount[account]++
	return true
}

func (o *ownSlots) ReleaseReplay(account string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total--
	if o.byAccount[account]--; o.byAccount[account] == 0 {
		delete(o.byAccount, account)
	}
}
