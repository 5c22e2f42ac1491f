package api

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/store"
)

type replayIn struct {
	ID     string   `json:"id"`
	Reason string   `json:"reason"`
	Actor  string   `json:"actor"`
	Filter filterIn `json:"filter"`
	Limit  int64    `json:"limit"`
	Rate   float64  `json:"rate"`
	Force  bool     `json:"force"`
	DryRun bool     `json:"dry_run"`
	// IncludeResolved replays dead letters delivered since too.
	IncludeResolved bool `json:"include_resolved"`
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
	// IncludeResolved resends dead letters delivered since too.
	IncludeResolved bool `json:"include_resolved"`
}

func (s *V1) createReplay(w http.ResponseWriter, r *http.Request, c caller) {
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
		SinceSpec: in.Filter.Since, UntilSpec: in.Filter.Until, Limit: in.Limit, Rate: in.Rate, Force: in.Force, DryRun: in.DryRun,
		IncludeResolved: in.IncludeResolved}
	s.startReplay(w, r, c, req)
}

func (s *V1) resend(w http.ResponseWriter, r *http.Request, c caller) {
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
		SinceSpec: in.Since, UntilSpec: in.Until, Limit: in.Limit, Rate: in.Rate, Force: in.Force, DryRun: in.DryRun,
		IncludeResolved: in.IncludeResolved}
	s.startReplay(w, r, c, req)
}

// startReplay answers a dry run at once (200 with the counts), and for a
// real replay writes its audit row first, then starts it in the
// background (202 with the row's location, to poll at /v1/replays/{id}):
// a 202 always points to a row. A request already done answers 200 with
// its row.
func (s *V1) startReplay(w http.ResponseWriter, r *http.Request, c caller, req replay.Request) {
	be, baseCtx := s.backend()
	if !c.admin {
		req.Account = c.account
	}
	if req.DryRun {
		res, err := replay.Run(r.Context(), be.Replay, req)
		if err != nil {
			s.replayError(w, r, c, req, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	who := c.account // "" for the admin token
	if !s.replays.acquire(who, s.cfg.MaxReplays, s.cfg.MaxReplaysPerAccount) {
		w.Header().Set("Retry-After", replayRetryAfter)
		writeError(w, http.StatusTooManyRequests, "too_many_replays", fmt.Sprintf(
			"too many replays running: at most %d per account and %d in all; try again when one finished (GET /v1/replays)",
			s.cfg.MaxReplaysPerAccount, s.cfg.MaxReplays))
		return
	}
	p, err := replay.Prepare(r.Context(), be.Replay, req)
	if err != nil {
		s.replays.release(who)
		s.replayError(w, r, c, req, err)
		return
	}
	row := p.Row()
	if row.Status == store.ReplayDone {
		s.replays.release(who)
		writeJSON(w, http.StatusOK, replay.Result{Replay: c.view(row), AlreadyDone: true})
		return
	}
	s.runs.Go(func() {
		defer s.replays.release(who)
		res, err := p.Run(baseCtx)
		if err != nil {
			s.logger.WarnContext(baseCtx, "api replay stopped", "replay_id", row.ID, "status", res.Status, "error", err)
			return
		}
		s.logger.InfoContext(baseCtx, "api replay finished", "replay_id", row.ID, "replayed", res.Replayed, "skipped", res.Skipped)
	})
	w.Header().Set("Location", "/v1/replays/"+row.ID)
	writeJSON(w, http.StatusAccepted, map[string]any{"id": row.ID, "status": store.ReplayRunning, "location": "/v1/replays/" + row.ID})
}

// replayRetryAfter is the Retry-After of a 429 too_many_replays, in
// seconds.
const replayRetryAfter = "30"

// AcquireReplay takes one of account's replay slots ("" for operators)
// under MaxReplays and MaxReplaysPerAccount, for a resend or replay run
// outside the API: the portal's resends share these slots
// (portal.Deps.ReplaySlots). ReleaseReplay gives it back.
func (s *V1) AcquireReplay(account string) bool {
	return s.replays.acquire(account, s.cfg.MaxReplays, s.cfg.MaxReplaysPerAccount)
}

// ReleaseReplay gives back a slot AcquireReplay took.
func (s *V1) ReleaseReplay(account string) { s.replays.release(account) }

// replaySlots counts the replays running in the background, in all and per
// account, so that one account cannot start enough slow replays to take
// every Postgres connection the API needs.
type replaySlots struct {
	mu        sync.Mutex
	total     int
	byAccount map[string]int
}

// acquire takes a slot for account unless max replays run in all or
// perAccount for the account.
func (r *replaySlots) acquire(account string, max, perAccount int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total >= max || r.byAccount[account] >= perAccount {
		return false
	}
	if r.byAccount == nil {
		r.byAccount = map[string]int{}
	}
	r.total++
	r.byAccount[account]++
	return true
}

func (r *replaySlots) release(account string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total--
	if r.byAccount[account]--; r.byAccount[account] == 0 {
		delete(r.byAccount, account)
	}
}

// replayError answers a replay request the replay package refused.
func (s *V1) replayError(w http.ResponseWriter, r *http.Request, c caller, req replay.Request, err error) {
	switch {
	case errors.Is(err, replay.ErrEndpointNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, replay.ErrEndpointDisabled):
		writeError(w, http.StatusConflict, "endpoint_disabled", err.Error())
	case errors.Is(err, replay.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, replay.ErrRequestMismatch):
		// The message names the other request's actor and reason: only
		// the admin token sees it.
		id := req.ID
		if id == "" {
			id = req.DerivedID()
		}
		msg := "replay id " + id + " is taken by a different request"
		if c.admin {
			msg = err.Error()
		}
		writeError(w, http.StatusConflict, "conflict", msg)
	default:
		s.internal(w, r, err)
	}
}

func (s *V1) listReplays(w http.ResponseWriter, r *http.Request, c caller) {
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
	for i := range rs {
		rs[i] = c.view(rs[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": rs})
}

// view is a replay as the caller may see it: an account sees the progress
// of its own dead letters only (replay.AccountView).
func (c caller) view(row store.Replay) store.Replay {
	if c.admin {
		return row
	}
	return replay.AccountView(row)
}

func (s *V1) getReplay(w http.ResponseWriter, r *http.Request, c caller) {
	be, _ := s.backend()
	id := r.PathValue("id")
	var (
		row store.Replay
		err error
	)
	// Replay ids are per account: an account token reads its own; the
	// admin token any, naming the account (?account=) when several have
	// the id.
	account, named := r.URL.Query().Get("account"), r.URL.Query().Has("account")
	switch {
	case !c.admin && named && account != c.account:
		writeError(w, http.StatusBadRequest, "invalid", "account: this token sees only account "+c.account)
		return
	case !c.admin:
		row, err = be.Store.GetAccountReplay(r.Context(), c.account, id)
	case named:
		row, err = be.Store.GetAccountReplay(r.Context(), account, id)
	default:
		row, err = be.Store.GetReplay(r.Context(), id)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "replay "+id+" not found")
	case errors.Is(err, store.ErrReplayAmbiguous):
		writeError(w, http.StatusConflict, "conflict", "replay id "+id+" is used by several accounts: name one with ?account=")
	case err != nil:
		s.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, c.view(row))
	}
}
