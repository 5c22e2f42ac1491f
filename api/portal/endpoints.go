package portal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// endpointRow is one endpoint with its health.
type endpointRow struct {
	E  endpoint.Endpoint
	St store.EndpointStats
	// Dead are its dead letters in the last hour and 24 h (the banner).
	Dead  store.DeadLetterCounts
	State string
}

func endpointState(e endpoint.Endpoint) string {
	switch {
	case !e.Active():
		return "disabled"
	case !e.FailingSince.IsZero():
		return "failing"
	}
	return "active"
}

// endpointsPage is an account's home: its endpoints, their state and 24 h
// health.
func (h *Handler) endpointsPage(w http.ResponseWriter, r *http.Request, s *session) error {
	var eps []endpoint.Endpoint
	if s.EndpointID != "" {
		e, err := h.endpointFor(r.Context(), s, s.EndpointID)
		if err != nil && !errors.Is(err, errNotFound) {
			return err
		}
		if err == nil {
			eps = append(eps, e)
		}
	} else {
		var err error
		if eps, err = h.store().ListEndpoints(r.Context(), store.ListEndpointsParams{Account: s.Account, Limit: 500}); err != nil {
			return err
		}
	}
	rows, err := h.withStats(r.Context(), s.Account, eps, h.now().Add(-24*time.Hour))
	if err != nil {
		return err
	}
	chart, err := h.accountChart(r, s.Account, eps)
	if err != nil {
		return err
	}
	v := endpointsView{Rows: rows, Chart: chart}
	if s.CanManage() && s.EndpointID == "" {
		if v.Catalog, _, err = h.catalogChoices(r.Context(), nil); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, "endpoints", view{Title: "Endpoints", Nav: "endpoints", S: s, Data: v})
}

func (h *Handler) withStats(ctx context.Context, account string, eps []endpoint.Endpoint, since time.Time) ([]endpointRow, error) {
	ids := make([]string, len(eps))
	for i, e := range eps {
		ids[i] = e.ID
	}
	stats, err := h.store().PortalEndpointStats(ctx, account, ids, since)
	if err != nil {
		return nil, err
	}
	dead, err := h.store().CountDeadLetters(ctx, account, ids, h.now())
	if err != nil {
		return nil, err
	}
	rows := make([]endpointRow, len(eps))
	for i, e := range eps {
		rows[i] = endpointRow{E: e, St: stats[e.ID], Dead: dead[e.ID], State: endpointState(e)}
	}
	return rows, nil
}

// windows are the health windows of the endpoint page.
var windows = map[string]time.Duration{"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// endpointView is the endpoint page's data.
// clientCertView is an endpoint's client certificate on its page.
type clientCertView struct {
	endpoint.ClientCertInfo
	// Soon is within endpoint.ClientCertWarning (14 days) of expiry;
	// Expired is past it.
	Soon, Expired bool
}

type endpointView struct {
	endpointRow
	Window      string
	Chart       *chartView
	Classes     []store.OutcomeCount
	Types       []store.OutcomeCount
	DeadLetters []store.Delivery
	// Secrets are masked: their first characters only.
	Secrets []string
	// PublicKeys are the whpk_ keys of the ed25519 signing keys.
	PublicKeys []string
	// ClientCert describes the client certificate (mutual TLS); nil when
	// none.
	ClientCert *clientCertView
	// Defaults of the limits the endpoint does not set.
	DefaultTimeout  time.Duration
	DefaultInFlight int
	DisableAfter    time.Duration
	// ResendSince prefills the recovery form (after a re-enable).
	ResendSince string
	// Confirm is the dry run of a recovery awaiting confirmation.
	Confirm *recoverConfirm
	// Catalog offers the catalogued event types in the settings form;
	// FreeTypes are the endpoint's other types and patterns.
	Catalog   []catalogChoice
	FreeTypes []string
}

func (h *Handler) endpointPage(w http.ResponseWriter, r *http.Request, s *session) error {
	v, err := h.endpointData(r, s)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "endpoint", view{Title: "Endpoint " + v.E.ID, Nav: "endpoints", S: s, Data: v})
}

func (h *Handler) endpointData(r *http.Request, s *session) (endpointView, error) {
	ctx := r.Context()
	e, err := h.endpointFor(ctx, s, r.PathValue("id"))
	if err != nil {
		return endpointView{}, err
	}
	win := r.URL.Query().Get("window")
	if win == "" {
		win = "24h"
	}
	d, ok := windows[win]
	if !ok {
		return endpointView{}, badInput("window: must be 24h, 7d or 30d, got %q", clip(win))
	}
	since := h.now().Add(-d)
	rows, err := h.withStats(ctx, s.Account, []endpoint.Endpoint{e}, since)
	if err != nil {
		return endpointView{}, err
	}
	v := endpointView{endpointRow: rows[0], Window: win, DefaultTimeout: h.cfg.RequestTimeout, DefaultInFlight: h.cfg.MaxInFlight,
		DisableAfter: h.cfg.DisableAfter}
	if v.Chart, err = h.chartFor(ctx, s.Account, []string{e.ID}, win, zoneOf(r)); err != nil {
		return v, err
	}
	if v.Classes, err = h.store().PortalOutcomeClasses(ctx, s.Account, e.ID, since); err != nil {
		return v, err
	}
	if v.Types, err = h.store().PortalTypeCounts(ctx, s.Account, e.ID, since); err != nil {
		return v, err
	}
	if v.DeadLetters, _, err = h.store().DeliveryLog(ctx, store.DeliveryLogParams{Account: s.Account, EndpointID: e.ID,
		Status: "dead", Limit: 10}); err != nil {
		return v, err
	}
	for _, sec := range e.Secrets {
		v.Secrets = append(v.Secrets, strings.TrimSuffix(endpoint.MaskSecret(sec), "****"))
	}
	v.PublicKeys = e.PublicKeys()
	if info, ok := e.ClientCertInfo(); ok {
		now := h.now()
		v.ClientCert = &clientCertView{ClientCertInfo: info, Expired: now.After(info.NotAfter),
			Soon: now.Add(endpoint.ClientCertWarning).After(info.NotAfter)}
	}
	if v.Catalog, v.FreeTypes, err = h.catalogChoices(ctx, e.EventTypes); err != nil {
		return v, err
	}
	v.ResendSince = formatTime(recoverSince(e, h.now()))
	if rs := r.URL.Query().Get("resend_since"); rs != "" {
		if t, err := parseUTC("resend since", rs); err == nil {
			v.ResendSince = formatTime(t)
		}
	}
	return v, nil
}

// splitTypes reads the event types of the settings form: one per line or
// comma-separated.
func splitTypes(s string) []string {
	out := []string{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseHeaderLines reads the custom headers of the settings form: one
// "Name: value" per line, blank lines skipped, checked as the API checks
// them.
func parseHeaderLines(s string) (map[string]string, error) {
	out := map[string]string{}
	seen := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimRight(line, "\r"); strings.TrimSpace(line) == "" {
			continue
		}
		name, value, err := endpoint.ParseHeaderLine(line)
		if err != nil {
			return nil, badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
		}
		if seen[strings.ToLower(name)] {
			return nil, badInput("headers: %s given twice", name)
		}
		seen[strings.ToLower(name)] = true
		out[name] = value
	}
	if err := endpoint.ValidateHeaders(out); err != nil {
		return nil, badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
	}
	return out, nil
}

// clientCertForm reads the client certificate fields of the settings
// form: a new PEM certificate and key (both, checked to match and be
// unexpired), or clear_client_cert. change is false when neither is asked
// for: the key is never sent back to the page, so empty fields keep it.
func (h *Handler) clientCertForm(r *http.Request) (certKey [2]string, change bool, err error) {
	cert, key := strings.TrimSpace(r.PostFormValue("client_cert")), strings.TrimSpace(r.PostFormValue("client_key"))
	switch {
	case cert != "" || key != "":
		if _, err := endpoint.ParseClientCert(cert+"\n", key+"\n", h.now()); err != nil {
			return certKey, false, badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
		}
		return [2]string{cert + "\n", key + "\n"}, true, nil
	case r.PostFormValue("clear_client_cert") != "":
		return certKey, true, nil
	}
	return certKey, false, nil
}

// endpointSettings changes the URL, description, event types and custom
// headers (when the form has the field: an empty one clears them).
func (h *Handler) endpointSettings(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.endpointFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	rawURL, desc, types := strings.TrimSpace(r.PostFormValue("url")), r.PostFormValue("description"), formTypes(r)
	rawURL, err = endpoint.NormalizeURL(rawURL) // the host as a client dials it, checked and stored
	if err != nil {
		return badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
	}
	if len(types) > endpoint.MaxEventTypes {
		return badInput("event types: at most %d, got %d", endpoint.MaxEventTypes, len(types))
	}
	for _, t := range types {
		if err := endpoint.ValidatePattern(t); err != nil {
			return badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
		}
	}
	headers, hasHeaders := e.Headers, r.PostForm.Has("headers")
	if hasHeaders {
		if headers, err = parseHeaderLines(r.PostFormValue("headers")); err != nil {
			return err
		}
	}
	filter, hasFilter := e.Filter, r.PostForm.Has("filter")
	if hasFilter {
		raw := []byte(r.PostFormValue("filter"))
		if _, err := endpoint.ParseFilter(raw); err != nil {
			return badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
		}
		filter = endpoint.NormalizeFilter(raw)
	}
	cert, changeCert, err := h.clientCertForm(r)
	if err != nil {
		return err
	}
	ordering, hasOrdering := endpoint.Ordering(r.PostFormValue("ordering")), r.PostForm.Has("ordering")
	if hasOrdering && (ordering == "" || endpoint.ValidateOrdering(ordering) != nil) {
		return badInput("ordering: must be %q or %q, got %q", endpoint.OrderingNone, endpoint.OrderingFIFO, ordering)
	}
	if rawURL != e.URL && !h.cfg.AllowPrivateNetworks {
		if err := ssrf.CheckURL(r.Context(), h.resolver, rawURL); err != nil {
			return badInput("url: %v; private and internal destinations are refused", err)
		}
	}
	_, err = h.store().ModifyEndpoint(r.Context(), e.ID, func(x *endpoint.Endpoint) error {
		x.URL, x.Description, x.EventTypes = rawURL, desc, types
		if hasHeaders {
			x.Headers = headers
		}
		if hasFilter {
			x.Filter = filter
		}
		if changeCert {
			x.ClientCert, x.ClientKey = cert[0], cert[1]
		}
		if r.PostForm.Has("trace_form") { // an unchecked box sends nothing: the marker says the form had it
			x.SendTraceparent = r.PostFormValue("send_traceparent") == "on"
		}
		if hasOrdering {
			x.Ordering = ordering
		}
		return nil
	})
	if errors.Is(err, endpoint.ErrInvalid) {
		return badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
	}
	if err != nil {
		return err
	}
	h.audit(r.Context(), s, "endpoint settings", e.ID, fmt.Sprintf("url %s; %d event type(s); %d header(s)", rawURL, len(types), len(headers)))
	return h.redirect(w, r, s, "/portal/endpoints/"+e.ID, notice{Text: "Settings saved."})
}

// endpointStatus enables or disables an endpoint. Enabling offers to
// resend what it missed while disabled.
func (h *Handler) endpointStatus(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.endpointFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	action := r.PostFormValue("action")
	if action != "enable" && action != "disable" {
		return badInput("action: must be enable or disable")
	}
	disabledAt := e.DisabledAt
	_, err = h.store().ModifyEndpoint(r.Context(), e.ID, func(x *endpoint.Endpoint) error {
		if action == "disable" && x.Active() {
			x.Status, x.DisabledReason, x.DisabledAt = endpoint.StatusDisabled, "disabled in the portal by "+s.Actor(), h.now()
		}
		if action == "enable" && !x.Active() {
			x.Status, x.DisabledReason, x.DisabledAt, x.FailingSince = endpoint.StatusActive, "", time.Time{}, time.Time{}
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.audit(r.Context(), s, "endpoint "+action, e.ID, "")
	to := "/portal/endpoints/" + e.ID
	if action == "disable" {
		return h.redirect(w, r, s, to, notice{Text: "Endpoint disabled. Deliveries for it are dead-lettered (kept, not sent) until you enable it again."})
	}
	n := notice{Text: "Endpoint enabled."}
	if !disabledAt.IsZero() {
		n.Text += " What was dead-lettered while it was disabled can be sent again now."
		n.Link, n.LinkText = to+"?resend_since="+formatTime(disabledAt)+"#recover", "Resend since "+formatTime(disabledAt)
	}
	return h.redirect(w, r, s, to, n)
}

// endpointRotate puts a new signing secret first, keeps the current one
// for the overlap (receivers verify with either), and shows the new one
// once.
func (h *Handler) endpointRotate(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.endpointFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The new key is of the kind asked for, or of the current key's.
	scheme := r.PostFormValue("scheme")
	if scheme == "" {
		scheme = endpoint.SchemeOf(e.Secrets[0])
	}
	secret, err := endpoint.NewSigningKey(scheme)
	if err != nil {
		return badInput("%s", strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "))
	}
	_, err = h.store().ModifyEndpoint(r.Context(), e.ID, func(x *endpoint.Endpoint) error {
		x.Secrets = []string{secret, x.Secrets[0]}
		return nil
	})
	if err != nil {
		return err
	}
	h.audit(r.Context(), s, "secret rotated", e.ID, scheme)
	if endpoint.IsPrivateKey(secret) {
		// The private key never leaves hookd: the page lists the new
		// public key to verify with.
		return h.redirect(w, r, s, "/portal/endpoints/"+e.ID, notice{
			Text: "New ed25519 key pair: add its public key (listed first under Public keys) to your receiver. Deliveries are signed with both the new and the previous key until the next rotation."})
	}
	return h.redirect(w, r, s, "/portal/endpoints/"+e.ID, notice{Secret: secret,
		Text: "New signing secret. It is shown this once: copy it into your receiver now. Deliveries are signed with both the new and the previous secret until the next rotation."})
}

// endpointTest sends a test event of the chosen type to this endpoint only.
func (h *Handler) endpointTest(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.endpointFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	typ := strings.TrimSpace(r.PostFormValue("type"))
	if err := endpoint.ValidatePattern(typ); err != nil || strings.Contains(typ, "*") {
		return badInput("event type: a type such as invoice.paid (letters, digits, '_', '-' and dots; no '*'), got %q", clip(typ))
	}
	to := "/portal/endpoints/" + e.ID
	if !e.Active() {
		return h.redirect(w, r, s, to, notice{Error: true, Text: "The endpoint is disabled: enable it first. No test event was sent."})
	}
	evt, err := h.sendTest(r.Context(), e, typ, s.Actor())
	if err != nil {
		return err
	}
	h.audit(r.Context(), s, "test event", e.ID, evt+" "+typ)
	return h.redirect(w, r, s, to, notice{Text: "Test event " + evt + " (" + typ + ") sent; it is delivered, retried and logged like any other.",
		Link: "/portal/deliveries?event=" + evt, LinkText: "See it in the delivery log"})
}

// recoverConfirm is the dry run of a recovery, awaiting confirmation.
type recoverConfirm struct {
	Since, Until, Reason string
	Count                int64
	Skips                map[string]int64
	Limit                int64
	Rate                 float64
}

// endpointRecover replays an endpoint's dead letters since a time: a dry
// run that counts them, then, confirmed, the replay (capped and paced).
func (h *Handler) endpointRecover(w http.ResponseWriter, r *http.Request, s *session) error {
	e, err := h.endpointFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	req, err := h.recoverRequest(r, s, e)
	if err != nil {
		return err
	}
	to := "/portal/endpoints/" + e.ID
	if r.PostFormValue("step") == "confirm" {
		return h.startReplay(w, r, s, req, to)
	}
	req.DryRun = true
	be, _ := h.backend()
	res, err := replay.Run(r.Context(), be.Replay, req)
	if errors.Is(err, replay.ErrInvalid) {
		return badInput("%v", err)
	}
	if err != nil {
		return err
	}
	v, err := h.endpointData(r, s)
	if err != nil {
		return err
	}
	v.Confirm = &recoverConfirm{Since: formatTime(req.Filter.Since), Reason: req.Reason, Count: res.Replayed,
		Skips: res.Skips, Limit: req.Limit, Rate: req.Rate}
	if !req.Filter.Until.IsZero() {
		v.Confirm.Until = formatTime(req.Filter.Until)
	}
	return h.render(w, r, http.StatusOK, "endpoint", view{Title: "Endpoint " + e.ID, Nav: "endpoints", S: s, Data: v})
}

func (h *Handler) recoverRequest(r *http.Request, s *session, e endpoint.Endpoint) (replay.Request, error) {
	sinceS, untilS := strings.TrimSpace(r.PostFormValue("since")), strings.TrimSpace(r.PostFormValue("until"))
	if sinceS == "" {
		return replay.Request{}, badInput("since: required, e.g. 2026-05-01T10:00:00Z (UTC)")
	}
	since, err := parseUTC("since", sinceS)
	if err != nil {
		return replay.Request{}, err
	}
	var until time.Time
	if untilS != "" {
		if until, err = parseUTC("until", untilS); err != nil {
			return replay.Request{}, err
		}
	}
	switch {
	case since.After(h.now()):
		return replay.Request{}, badInput("since: %s is in the future", formatTime(since))
	case !until.IsZero() && !since.Before(until):
		return replay.Request{}, badInput("until: must be after since")
	}
	reason, err := reasonOf(r)
	if err != nil {
		return replay.Request{}, err
	}
	f := replay.Filter{EndpointID: e.ID, Account: e.Account, Since: since, Until: until}
	return replay.Request{Kind: replay.KindResend, Actor: s.Actor(), Reason: reason, Account: s.Account, Filter: f,
		Limit: h.cfg.ReplayLimit, Rate: h.cfg.ReplayRate}, nil
}

// recoverSince is the recovery form's default start: when the endpoint's
// current failures began, or else a day ago (the dead letters its banner
// counts), so nobody has to type an ISO timestamp to recover.
func recoverSince(e endpoint.Endpoint, now time.Time) time.Time {
	if !e.FailingSince.IsZero() {
		return e.FailingSince
	}
	return now.Add(-24 * time.Hour).Truncate(time.Minute)
}
